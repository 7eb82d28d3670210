"""`composer index`: build (or reuse) the Qdrant index of a corpus for a pipeline configuration."""

from __future__ import annotations

from pathlib import Path

import typer

from composer.cli.options import QDRANT, WORKDIR


def index_command(
    corpus: Path = typer.Argument(
        ..., help="Corpus: JSONL/JSON/CSV/Parquet, or a folder (or file) of PDF, Word, PowerPoint, HTML, "
        "Markdown and text files."
    ),
    config: Path = typer.Option(
        ..., "--config", help="Pipeline YAML (chunking, embedding, retrieval, rerank)."
    ),
    workdir: Path = WORKDIR,
    qdrant: str | None = QDRANT,
    report: bool = typer.Option(
        False, "--report", help="Print what reading the folder did: files, pages, characters, files "
        "skipped and why, Arabic/Persian repairs by kind.", metavar=""
    ),
    strict: bool = typer.Option(False, "--strict", help="Any file of the folder that gives no document "
                                "(encrypted, scanned, damaged, empty, unsupported) is an error (exit 2).",
                                metavar=""),
) -> None:
    """Build the index of CORPUS under its index key, or reuse the one already built; print its counts."""
    from rich.console import Console

    from composer.cli.progress import pipeline_progress
    from composer.data import load_corpus
    from composer.pipeline.pipeline import Pipeline

    docs = load_corpus(corpus, strict=strict)
    console = Console()
    if docs.report is not None:  # a folder: its one-line summary always, every line with --report
        lines = docs.report.lines()
        for line in lines if report else lines[:1]:
            console.print(line, markup=False, highlight=False)
    with pipeline_progress() as hook:
        pipeline = Pipeline.from_config(config, workdir=workdir, qdrant=qdrant, progress=hook)
        info = pipeline.index(docs)
    state = "reused" if info.reused else "built"
    console.print(
        f"index [bold]{info.key}[/] {state}: {info.n_documents} documents, {info.n_chunks} chunks, "
        f"{info.embeddings_computed} embeddings computed, {info.embeddings_reused} reused, "
        f"{info.seconds:.2f} s"
    )
