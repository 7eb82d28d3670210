"""`composer search`: ranked chunks for one question, to eyeball a configuration."""

from __future__ import annotations

from pathlib import Path

import typer

from composer.cli.options import QDRANT, WORKDIR


def search_command(
    query: str = typer.Argument(..., help="The question to search for."),
    corpus: Path = typer.Option(..., "--corpus", help="Corpus the index is built from."),
    config: Path = typer.Option(..., "--config", help="Pipeline YAML."),
    workdir: Path = WORKDIR,
    qdrant: str | None = QDRANT,
    width: int = typer.Option(160, "--width", help="Characters of each chunk to show."),
) -> None:
    """Print the chunks the pipeline retrieves for QUERY, best first."""
    from rich.table import Table
    from rich.text import Text

    from composer.cli.progress import pipeline_progress
    from composer.console import make_console
    from composer.data import load_corpus
    from composer.pipeline.pipeline import Pipeline

    docs = load_corpus(corpus)
    with pipeline_progress() as hook:
        pipeline = Pipeline.from_config(config, workdir=workdir, qdrant=qdrant, progress=hook)
        pipeline.index(docs)
        hits = pipeline.search(query)
    table = Table(title=Text(query), show_lines=True)  # Text: the user's words are not Rich markup
    for column in ("rank", "score", "chunk", "text"):
        table.add_column(column, overflow="fold")
    for rank, hit in enumerate(hits, 1):
        text = " ".join((hit.text or "").split())
        shown = text[:width] + ("…" if len(text) > width else "")
        table.add_row(str(rank), f"{hit.score:.4f}", Text(hit.id), Text(shown))
    make_console().print(table)
