"""Files that other processes may read while we write them: each appears whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, text: str | bytes, *, fsync: bool = False) -> None:
    """Write via a temporary file in the same directory and os.replace: readers never see half a file.

    ``fsync`` also makes the content durable before it becomes visible, for a file that vouches for other
    files (an index's completion flag), so a power loss cannot leave it claiming what never reached disk.
    """
    if not isinstance(text, str | bytes):
        raise TypeError(f"write_atomic takes str or bytes, not {type(text).__name__}")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text if isinstance(text, bytes) else text.encode("utf-8"))
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
