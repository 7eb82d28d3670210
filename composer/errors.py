"""Errors that reach the user as one readable line, no traceback: exit code 2 for bad input, 1 for a run
that had to stop (the CLI reads ``exit_code``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


_OPEN, _CLOSE = "\ue000", "\ue001"
_OPTION = re.compile(f"{_OPEN}([a-z_]+)(?:=([^{_CLOSE}]*))?{_CLOSE}")
OPTIONS: dict[str, tuple[str, str]] = {
    "study_name": ("--study-name", "name="),
    "debug": ("--debug", 'logging.getLogger("composer").setLevel("DEBUG")'),
}
"""Each option a message may suggest, by role: (the CLI's flag, the Python API's words)."""


def causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then the errors it was raised from or while handling, each once: what a library raised
    over the error that matters (Optuna's ``AssertionError`` over a full disk, an error from a ``finally``
    over a Ctrl-C) is read through to it."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def option(role: str, value: str | None = None) -> str:
    """The option playing ``role`` (a key of ``OPTIONS``), with an example ``value``, as a ComposerError's
    message holds it: ``str(error)`` speaks the API's words (``name='x'``), ``cli_message()`` the CLI's
    (``--study-name x``), so one message serves both callers."""
    if role not in OPTIONS:
        raise KeyError(role)
    return f"{_OPEN}{role}{'' if value is None else '=' + value}{_CLOSE}"


def _spoken(text: str, cli: bool) -> str:
    def word(match: re.Match[str]) -> str:
        flag, api = OPTIONS[match.group(1)]
        value = match.group(2)
        if value is None:
            return flag if cli else api
        return f"{flag} {value}" if cli else f"{api}{value!r}"

    return _OPTION.sub(word, text)


class ComposerError(Exception):
    """Base class for errors Composer reports without a traceback. Options a message suggests (see
    ``option``) read as the API's words in ``str()``, as the CLI's flags in ``cli_message()``.

    Args:
        *args: The message (as for ``Exception``).

    Example:
        ::

            try:
                composer.evaluate(system, "questions.jsonl", "corpus.jsonl")
            except composer.ComposerError as error:
                print(error)  # one readable line
    """

    exit_code = 2

    def __str__(self) -> str:
        return _spoken(super().__str__(), cli=False)

    def cli_message(self) -> str:
        """The message as the command line says it: its options as flags.

        Returns:
            The message, options as CLI flags.
        """
        return _spoken(super().__str__(), cli=True)


class StudyStopped(ComposerError):
    """A study ended early because its trials kept failing (a dead endpoint, a broken store): the input
    may be fine, so the exit code says "the run failed", not "bad input"."""

    exit_code = 1


class BudgetSpent(ComposerError):
    """An LLM budget (the study's ``stop:`` block) ran out part-way: what was running stops (a trial fails
    "budget", a prompt optimization ends without its held-out re-score), and so does the study. Here, not
    in ``composer.study``, so that ``composer.prompt_tuning`` below it can stop on it too."""


class InputError(ComposerError):
    """Bad user input, located as precisely as we can: file, line, field.

    Args:
        message: What is wrong.
        path: The file (or an argument's name, such as ``<list>``).
        line: The line or row in it.
        field: The key or API argument.

    Example:
        ::

            try:
                composer.evaluate(system, "questions.jsonl")
            except composer.InputError as error:
                print(error.path, error.line, error.field, error.message)
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.raw_message = message
        """The message as raised, its options still marked (``option``): what to raise again elsewhere (in
        another process, under another location) so that each caller still reads it in its own words."""
        self.path = str(path) if path is not None else None
        self.line = line
        self.field = field
        super().__init__(self.location_message())

    @property
    def message(self) -> str:
        """What is wrong, the options it suggests in the API's words (see ``option``)."""
        return _spoken(self.raw_message, cli=False)

    def location_message(self) -> str:
        """The message prefixed with where it is: ``path:line (field 'key'): message``."""
        where = ""
        if self.path:
            where = self.path
            if self.line is not None:
                where += f":{self.line}"
        if self.field:
            where += f" (field '{self.field}')" if where else f"field '{self.field}'"
        return f"{where}: {self.raw_message}" if where else self.raw_message


class ConfigError(InputError):
    """A configuration file or value is invalid (an ``InputError``: same arguments and fields).

    Args:
        message: What is wrong.
        path: The config file, or ``<config>`` for one in memory.
        line: The line in it, where known.
        field: The dotted key or API argument (``retrieval.k``, ``judge``).

    Example:
        ::

            try:
                composer.load_pipeline({"retrieval": {"kk": 3}})
            except composer.ConfigError as error:
                print(error.field)  # retrieval.kk
    """


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
