"""Advisory file locks (POSIX ``flock``): how processes sharing a workdir agree on who opens or builds what.

The kernel drops a process's locks when it dies, so a crash never leaves a stale lock behind: a lock
file on disk means nothing by itself, only a held lock does. Locks are per open file, so one process
must hold a given lock through a single ``FileLock`` (keep it in a registry, as the index backend does).
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path
from types import TracebackType


class FileLock:
    """An exclusive lock on ``path``, or with ``shared`` one that other shared holders may hold too (the
    file is created if missing, never deleted by the lock itself)."""

    def __init__(self, path: str | Path, *, shared: bool = False) -> None:
        self.path = Path(path)
        self.shared = shared
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, *, blocking: bool = True) -> bool:
        """Take the lock; without ``blocking``, return False at once when another holder has it."""
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already locked by this FileLock")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            mode = fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX
            fcntl.flock(fd, mode | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @classmethod
    def create_held(cls, path: str | Path) -> FileLock:
        """A new lock file that appears on disk already locked (temp file, lock, rename), so no other
        process can take it in between; ``path`` must be a name nobody else creates."""
        target = Path(path)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".", suffix=".tmp")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.replace(tmp, target)
        except BaseException:
            os.close(fd)
            Path(tmp).unlink(missing_ok=True)
            raise
        lock = cls(target)
        lock._fd = fd
        return lock

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
