"""A folder packed without its holes: how a finished Qdrant Edge shard travels inside a registered model.

An Edge shard preallocates its files (32 MiB WAL segments and storage pages) and writes a few KiB of each:
copied file by file (as MLflow copies artifacts) a 561-chunk shard of 224 KB on disk became 137 MB. A
pack is a folder of two files: ``files.json`` (each file's path, size and the extents that hold data,
with their place in the blob) and ``data.bin`` (those extents, back to back). Holes and runs of zeros are
left out (found with ``SEEK_DATA``/``SEEK_HOLE`` where the file system reports them, and by comparing
blocks with zeros), and unpacking recreates each file at its size with only those extents written (in the
kernel with ``copy_file_range`` where it can), so the copy is sparse again.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FORMAT = "composer-packed-folder/v1"
MANIFEST = "files.json"
BLOB = "data.bin"
BLOCK = 1 << 20
"""Granularity of the zero-block test: a block of this size (or a file's last, shorter one) that holds
only zeros is left out."""
_ZEROS = bytes(BLOCK)


def pack_folder(source: Path, dest: Path) -> int:
    """Pack every file under ``source`` into the new folder ``dest``; the bytes of data packed."""
    dest.mkdir(parents=True)
    files: list[dict[str, Any]] = []
    packed = 0
    with open(dest / BLOB, "wb") as blob:
        for path in sorted(p for p in source.rglob("*") if p.is_file() and not p.is_symlink()):
            extents: list[list[int]] = []
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                for lo, hi in _data_ranges(f.fileno(), size):
                    for offset in range(lo, hi, BLOCK):
                        f.seek(offset)
                        block = f.read(min(BLOCK, hi - offset))
                        if block == _ZEROS[: len(block)]:
                            continue
                        if extents and extents[-1][0] + extents[-1][1] == offset:
                            extents[-1][1] += len(block)  # continues the previous extent
                        else:
                            extents.append([offset, len(block), packed])
                        blob.write(block)
                        packed += len(block)
            files.append({"path": path.relative_to(source).as_posix(), "size": size, "extents": extents})
    dirs = sorted(p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_dir())
    manifest = {"format": FORMAT, "dirs": dirs, "files": files, "bytes": packed}
    (dest / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    return packed


def unpack_folder(pack: Path, dest: Path) -> None:
    """Recreate the folder packed as ``pack`` at ``dest`` (created; it must not exist)."""
    manifest = json.loads((pack / MANIFEST).read_text(encoding="utf-8"))
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{pack} is not a packed folder of format {FORMAT}")
    dest.mkdir(parents=True)
    for name in manifest["dirs"]:
        (dest / _inside(name)).mkdir(parents=True, exist_ok=True)
    with open(pack / BLOB, "rb") as blob:
        for entry in manifest["files"]:
            path = dest / _inside(entry["path"])
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.ftruncate(fd, int(entry["size"]))  # a hole until written
                for offset, length, at in entry["extents"]:
                    _copy(blob.fileno(), fd, int(at), int(offset), int(length))
            finally:
                os.close(fd)


def _inside(name: str) -> str:
    """A manifest's relative path, refused if it would leave the folder."""
    parts = Path(name).parts
    if not parts or Path(name).is_absolute() or ".." in parts:
        raise ValueError(f"packed path {name!r} leaves its folder")
    return name


def _data_ranges(fd: int, size: int) -> Iterator[tuple[int, int]]:
    """The ranges of an open file that hold data, by ``SEEK_DATA``/``SEEK_HOLE`` (the whole file where the
    file system does not say)."""
    seek_data, seek_hole = getattr(os, "SEEK_DATA", None), getattr(os, "SEEK_HOLE", None)
    if seek_data is None or seek_hole is None:
        yield 0, size
        return
    offset = 0
    while offset < size:
        try:
            lo = os.lseek(fd, offset, seek_data)
        except OSError as exc:  # ENXIO: only a hole is left; EINVAL: not supported
            if exc.errno == errno.ENXIO:
                return
            yield offset, size
            return
        hi = min(os.lseek(fd, lo, seek_hole), size)
        yield lo, hi
        offset = hi


def _copy(src: int, dst: int, src_at: int, dst_at: int, length: int) -> None:
    """``length`` bytes of ``src`` at ``src_at`` written into ``dst`` at ``dst_at``."""
    copy_range = getattr(os, "copy_file_range", None)
    while length > 0:
        done = 0
        if copy_range is not None:
            try:
                done = copy_range(src, dst, length, src_at, dst_at)
            except OSError:
                copy_range = None  # not across these file systems: plain reads and writes
        if not done:
            data = os.pread(src, min(length, BLOCK), src_at)
            if not data:
                raise ValueError("the packed data ends early")
            done = os.pwrite(dst, data, dst_at)
        src_at, dst_at, length = src_at + done, dst_at + done, length - done
