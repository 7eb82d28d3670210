"""Errors that reach the user as one readable line (the CLI maps them to exit code 2)."""

from __future__ import annotations

from pathlib import Path


class ComposerError(Exception):
    """Base class for errors Composer reports without a traceback."""


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
