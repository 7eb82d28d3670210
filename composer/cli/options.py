"""Options shared by several commands: those that run a pipeline, and those that read a study."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
EXPERIMENT = typer.Option(
    None, "--experiment", "-e", help="Experiment YAML whose storage (and name) to use."
)
STORAGE = typer.Option(
    None, "--storage", help="Optuna storage URL (default: the experiment's, else sqlite:///.composer/optuna.db)."
)


def flag(name: str, help: str) -> Any:
    """A switch that takes no value. Typer prints every option's type in --help, a switch as
    ``--json <bool>`` as if it took one; an empty metavar leaves the column blank."""
    return typer.Option(False, name, help=help, metavar="")
