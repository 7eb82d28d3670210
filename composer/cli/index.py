"""`composer index`: build (or reuse) the Qdrant index of a corpus for a pipeline configuration."""

from __future__ import annotations

from pathlib import Path

import typer

from composer.cli.options import QDRANT, WORKDIR


def index_command(
    corpus: Path = typer.Argument(..., help="Corpus: JSONL/JSON/CSV/Parquet or a folder of .txt/.md files."),
    config: Path = typer.Option(
        ..., "--config", help="Pipeline YAML (chunking, embedding, retrieval, rerank)."
    ),
    workdir: Path = WORKDIR,
    qdrant: str | None = QDRANT,
) -> None:
    """Build the index of CORPUS under its index key, or reuse the one already built; print its counts."""
    from rich.console import Console

    from composer.cli.progress import pipeline_progress
    from composer.data import load_corpus
    from composer.pipeline.pipeline import Pipeline

    docs = load_corpus(corpus)
    with pipeline_progress() as hook:
        pipeline = Pipeline.from_config(config, workdir=workdir, qdrant=qdrant, progress=hook)
        info = pipeline.index(docs)
    state = "reused" if info.reused else "built"
    Console().print(
        f"index [bold]{info.key}[/] {state}: {info.n_documents} documents, {info.n_chunks} chunks, "
        f"{info.embeddings_computed} embeddings computed, {info.embeddings_reused} reused, "
        f"{info.seconds:.2f} s"
    )
