"""Files that other processes may read while we write them: each appears whole or not at all, with the
umask's permissions like any file the user makes; and a write that fails because the disk is full, said
in one line naming the file; and user files opened for reading only when they are regular files (a FIFO
would block, ``/dev/zero`` never ends)."""

from __future__ import annotations

import errno
import os
import secrets
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from composer.errors import ComposerError, InputError, causes

_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_WRITE_FAULTS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file too large (for its file system, or past `ulimit -f`)",
    errno.EROFS: "read-only file system",
}
"""What a write can fail on that no input causes and no retry mends: the file system's limits."""
_SQLITE_FULL = 13  # primary result code: "database or disk is full"
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
_TEMPORARY_NAMES = 100
"""Random temporary names tried before giving up (32 bits each: one clash is already unlikely)."""


class NoSpaceError(ComposerError):
    """A write failed for want of disk space (or quota), or on another limit of the file system holding
    ``path`` (``reason``: a file too large for it, a read-only mount)."""

    def __init__(self, path: str | Path, reason: str = _WRITE_FAULTS[errno.ENOSPC]) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{reason} writing {self.path}")


def default_cache_dir() -> Path:
    """The user's cache folder: ``$COMPOSER_CACHE_DIR``, else ``$XDG_CACHE_HOME/composer``, else
    ``~/.cache/composer``."""
    if explicit := os.environ.get("COMPOSER_CACHE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "composer"


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
    """The full disk (or other file-system limit, see ``write_fault``) behind ``exc``, following the errors
    it was raised from or while handling: Optuna, failing to store a trial's end, raises
    ``AssertionError("Should not reach.")`` over the real error. None when no such limit is behind it."""
    for current in causes(exc):
        if isinstance(current, NoSpaceError):
            return current
        named = getattr(current, "filename", None) or "a file (its name was not reported)"
        if (fault := write_fault(current, named)) is not None:
            return fault
    return None


def write_fault(exc: BaseException, path: str | Path) -> NoSpaceError | None:
    """``exc`` as a NoSpaceError naming ``path`` when it is a limit of the file system (no space or quota
    left, a file too large, a read-only mount), else None."""
    if isinstance(exc, OSError) and exc.errno in _WRITE_FAULTS:
        return NoSpaceError(path, _WRITE_FAULTS[exc.errno])
    return NoSpaceError(path) if disk_full(exc) else None


def write_atomic(path: Path, text: str | bytes, *, fsync: bool = False, private: bool = False) -> None:
    """Write via a temporary file in the same directory and os.replace: readers never see half a file.

    ``fsync`` also makes the content durable before it becomes visible, for a file that vouches for other
    files (an index's completion flag), so a power loss cannot leave it claiming what never reached disk.
    The file gets the umask's permissions (0644 typically), or 0600 if ``private``: for one that may hold
    a credential (an unscrubbed config).
    """
    if not isinstance(text, str | bytes):
        raise TypeError(f"write_atomic takes str or bytes, not {type(text).__name__}")
    with atomic_output(path, fsync=fsync, private=private) as f:
        f.write(text if isinstance(text, bytes) else text.encode("utf-8"))


@contextmanager
def atomic_output(path: Path, *, fsync: bool = False, private: bool = False) -> Iterator[BinaryIO]:
    """A binary file to write ``path``'s content into, a piece at a time; it replaces ``path`` once the
    block ends without an error (see ``write_atomic``), and is removed otherwise."""
    try:
        fd, tmp = temporary_beside(path, private=private)
    except OSError as exc:  # named as the file it was to become, not the temporary one
        if (fault := write_fault(exc, path)) is not None:
            raise fault from exc
        raise
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if (fault := write_fault(exc, path)) is not None:
            raise fault from exc
        raise


def plain_name(name: object) -> bool:
    """Whether ``name`` (read from a file: a spool record's table key or chart name) is one plain, visible
    file name, so that a folder joined with it stays that folder: no separator, no ``..``, no leading dot."""
    return (isinstance(name, str) and bool(name) and not name.startswith(".") and "/" not in name
            and "\\" not in name and "\0" not in name)


def temporary_beside(path: Path, *, private: bool = False) -> tuple[int, str]:
    """A new file ``.<name>.<random>.tmp`` beside ``path``, open for writing, created with 0666 less the
    umask (0600 if ``private``): the mode of any file the user makes, applied by the kernel as ``open``
    creates it (``mkstemp``'s 0600 kept reports and artifacts made to be shared from a team or a
    container; a chmod after it would have to read the umask, which only setting it can do, for every
    thread at once)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    for _ in range(_TEMPORARY_NAMES):
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, flags, 0o600 if private else 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"no free temporary name beside {path}")


def not_regular(mode: int) -> str | None:
    """What a file of ``mode`` (``os.stat``'s ``st_mode``) is when it is not a regular file ("a FIFO (named
    pipe)", "a character device"...), None when it is: reading a FIFO waits for a writer that may never
    come, and a device such as ``/dev/zero`` never ends."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def check_regular(path: Path) -> None:
    """An InputError naming ``path`` unless it is a regular file (or a link to one), found with ``os.stat``
    before anything opens it."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        broken = f" (a broken link to {os.readlink(path)})" if path.is_symlink() else ""
        raise InputError(f"file not found{broken}", path=path) from None
    except OSError as e:
        raise InputError(f"cannot read file: {e.strerror or e}", path=path) from e
    kind = not_regular(mode)
    if kind is not None:
        link = f", a link to {os.path.realpath(path)}" if path.is_symlink() else ""
        raise InputError(f"expected a file, got {kind}{link}", path=path)


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for binary reading if it is a regular file, else an InputError naming it. The check
    is made again on the open file, which is opened without waiting for a writer (``O_NONBLOCK``), so a
    file swapped for a FIFO after ``check_regular`` does not block either."""
    check_regular(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise InputError(f"cannot read file: {e.strerror or e}", path=path) from e
    try:
        kind = not_regular(os.fstat(fd).st_mode)
        if kind is not None:
            raise InputError(f"expected a file, got {kind}", path=path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
