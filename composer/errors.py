"""Errors that reach the user as one readable line, no traceback: exit code 2 for bad input, 1 for a run
that had to stop (the CLI reads ``exit_code``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class ComposerError(Exception):
    """Base class for errors Composer reports without a traceback."""

    exit_code = 2


class StudyStopped(ComposerError):
    """A study ended early because its trials kept failing (a dead endpoint, a broken store): the input
    may be fine, so the exit code says "the run failed", not "bad input"."""

    exit_code = 1


class InputError(ComposerError):
    """Bad user input, located as precisely as we can: file, line, field."""

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.path = str(path) if path is not None else None
        self.line = line
        self.field = field
        super().__init__(self.location_message())

    def location_message(self) -> str:
        where = ""
        if self.path:
            where = self.path
            if self.line is not None:
                where += f":{self.line}"
        if self.field:
            where += f" (field '{self.field}')" if where else f"field '{self.field}'"
        return f"{where}: {self.message}" if where else self.message


class ConfigError(InputError):
    """A configuration file or value is invalid."""


def config_error(
    exc: ValidationError, source: str | Path, *, under: str | None = None, field: str | None = None
) -> ConfigError:
    """Pydantic's first error as one located line: its message without pydantic's noise ("Value error,
    ..."), the offending value quoted when it is a scalar, and its dotted key: pydantic's location, below
    ``under`` when the data validated sits there; ``field`` names the key instead (a lone value checked
    against a setting, whose own location means nothing to the user)."""
    err = exc.errors()[0]
    if field is None:
        field = ".".join([*([under] if under else []), *(str(p) for p in err["loc"])]) or None
    if err["type"] == "extra_forbidden":
        message = "unknown key"
    elif err["type"] == "value_error":
        message = str(err["ctx"]["error"])
    elif isinstance(err.get("input"), str | int | float):
        message = f"{err['msg']} (got {err['input']!r})"
    else:
        message = err["msg"]
    return ConfigError(message, path=source, field=field)
