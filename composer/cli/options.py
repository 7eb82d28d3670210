"""Options shared by several commands: those that run a pipeline, and those that read a study."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from composer.errors import ConfigError

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


def _allowed_env(names: list[str] | None) -> list[str]:
    """``--allow-env``'s names allowed as the command line is read, before any config is loaded."""
    from composer.secrets import allow_env

    try:
        allow_env(*(names or ()))
    except ConfigError as exc:
        raise ConfigError(exc.raw_message, field="--allow-env") from None
    return names or []


ALLOW_ENV = typer.Option(
    None, "--allow-env", metavar="NAME", callback=_allowed_env,
    help="Let configs and models read a key from this environment variable (repeatable); COMPOSER_* "
    "variables and those in $COMPOSER_ALLOW_ENV are allowed already.",
)


def _allowed_modified(value: bool) -> bool:
    from composer.registered.model_files import allow_modified_models

    allow_modified_models(value)
    return value


ALLOW_MODIFIED = typer.Option(
    False, "--allow-modified-model", metavar="", callback=_allowed_modified,
    help="Load a registered model whose config files, endpoints or key variables differ from what was "
    "registered (its index and shard are still verified).",
)


def checked_study_name(param: typer.CallbackParam, value: str | None) -> str | None:
    """The STUDY argument's and ``--study-name``'s check, made while the command line is read, before
    anything is created: the experiment's ``name:`` check (a name that is a path, or markup, is refused)."""
    from composer.study.experiment import check_study_name

    if value is None:
        return None
    try:
        return check_study_name(value)
    except ValueError as exc:
        field = param.opts[0] if param.opts[0].startswith("-") else "STUDY"
        raise ConfigError(str(exc), field=field) from None


STUDY = typer.Argument(
    None, help="Study name (default: the experiment's name).", callback=checked_study_name
)


def flag(name: str, help: str) -> Any:
    """A switch that takes no value. Typer prints every option's type in --help, a switch as
    ``--json <bool>`` as if it took one; an empty metavar leaves the column blank."""
    return typer.Option(False, name, help=help, metavar="")
