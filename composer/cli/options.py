"""Options shared by several commands: those that run a pipeline, and those that read a study."""

from __future__ import annotations

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
EXPERIMENT = typer.Option(
    None, "--experiment", "-e", help="Experiment YAML whose storage (and name) to use."
)
STORAGE = typer.Option(
    None, "--storage", help="Optuna storage URL (default: the experiment's, else sqlite:///.composer/optuna.db)."
)
