"""The one place Composer makes a Rich console. What it prints holds the user's text (questions, chunks,
ids, paths, model names): emoji codes are off, so ``:x:`` in a chunk prints as ``:x:``; markup in user
text is escaped where it is printed (``rich.markup.escape``, or a ``Text``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


def make_console(*, stderr: bool = False, **options: Any) -> Console:
    """A Rich console on stdout (or ``stderr``) with emoji codes off; ``options`` go to ``Console``."""
    from rich.console import Console

    return Console(stderr=stderr, emoji=False, **options)
