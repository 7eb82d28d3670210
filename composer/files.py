"""Files that other processes may read while we write them: each appears whole or not at all; and a
write that fails because the disk is full, said in one line naming the file."""

from __future__ import annotations

import errno
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from composer.errors import ComposerError

_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_SQLITE_FULL = 13  # primary result code: "database or disk is full"


class NoSpaceError(ComposerError):
    """A write failed for want of disk space (or quota): the disk to free is the one holding ``path``."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        super().__init__(f"no space left on device writing {self.path}")


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` itself says the disk is full: ENOSPC or EDQUOT, or SQLite's SQLITE_FULL (also inside
    SQLAlchemy's wrapper, as Optuna and MLflow raise it)."""
    if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
        return True
    orig = getattr(exc, "orig", exc)
    if not isinstance(orig, sqlite3.Error):
        return False
    code = getattr(orig, "sqlite_errorcode", None)
    return code & 0xFF == _SQLITE_FULL if code is not None else "database or disk is full" in str(orig)


def disk_full_error(exc: BaseException) -> NoSpaceError | None:
    """The full disk behind ``exc``, following the errors it was raised from or while handling: Optuna,
    failing to store a trial's end, raises ``AssertionError("Should not reach.")`` over the real error.
    None when no full disk is behind it."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, NoSpaceError):
            return current
        if disk_full(current):
            return NoSpaceError(getattr(current, "filename", None) or "a file (its name was not reported)")
        current = current.__cause__ or current.__context__
    return None


def write_atomic(path: Path, text: str | bytes, *, fsync: bool = False) -> None:
    """Write via a temporary file in the same directory and os.replace: readers never see half a file.

    ``fsync`` also makes the content durable before it becomes visible, for a file that vouches for other
    files (an index's completion flag), so a power loss cannot leave it claiming what never reached disk.
    """
    if not isinstance(text, str | bytes):
        raise TypeError(f"write_atomic takes str or bytes, not {type(text).__name__}")
    with atomic_output(path, fsync=fsync) as f:
        f.write(text if isinstance(text, bytes) else text.encode("utf-8"))


@contextmanager
def atomic_output(path: Path, *, fsync: bool = False) -> Iterator[BinaryIO]:
    """A binary file to write ``path``'s content into, a piece at a time; it replaces ``path`` once the
    block ends without an error (see ``write_atomic``), and is removed otherwise."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if disk_full(exc):
            raise NoSpaceError(path) from exc
        raise
