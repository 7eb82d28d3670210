"""Options shared by the commands that run a pipeline."""

from __future__ import annotations

import os
from pathlib import Path

import typer

WORKDIR = typer.Option(
    Path(".composer"), "--workdir", help="Where caches and Qdrant Edge indexes live (shared by every run)."
)
QDRANT = typer.Option(
    None,
    "--qdrant",
    help="Qdrant location: omitted = embedded Qdrant Edge, ':memory:', or a server URL "
    "(API key from $QDRANT_API_KEY).",
)


def qdrant_api_key() -> str | None:
    """Read from the environment only, so the key never appears in shell history or process lists."""
    return os.environ.get("QDRANT_API_KEY") or None
