"""A folder packed without its holes: how a finished Qdrant Edge shard travels inside a registered model.

An Edge shard preallocates its files (32 MiB WAL segments and storage pages) and writes a few KiB of each:
copied file by file (as MLflow copies artifacts) a 561-chunk shard of 224 KB on disk became 137 MB. A
pack is a folder of two files: ``files.json`` (each file's path, size and the extents that hold data,
with their place in the blob) and ``data.bin`` (those extents, back to back). Holes and runs of zeros are
left out (found with ``SEEK_DATA``/``SEEK_HOLE`` where the file system reports them, and by comparing
blocks with zeros), and unpacking recreates each file at its size with only those extents written (in the
kernel with ``copy_file_range`` where it can), so the copy is sparse again.

A pack travels inside a model, which may come from anywhere: its manifest is checked whole before
unpacking creates anything (names inside the folder, extents inside their files and the blob, no blob
byte used twice, a cap on the declared size).
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

from composer.errors import ComposerError, InputError

FORMAT = "composer-packed-folder/v1"
MANIFEST = "files.json"
BLOB = "data.bin"
BLOCK = 1 << 20
"""Granularity of the zero-block test: a block of this size (or a file's last, shorter one) that holds
only zeros is left out."""
_ZEROS = bytes(BLOCK)
MAX_UNPACK = 16 << 30
"""The most bytes (files' declared sizes, holes included) a pack may unpack to: a shard of millions of
chunks stays far below it, a manifest that claims more is refused before anything is written."""
MAX_UNPACK_ENV = "COMPOSER_MAX_UNPACK_BYTES"


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
    """Recreate the folder packed as ``pack`` at ``dest`` (created; it must not exist). The manifest is
    checked whole before anything is created (``_checked``): a damaged or hostile pack is one
    ComposerError naming it, not a half-written folder."""
    dirs, files = _checked(pack)
    dest.mkdir(parents=True)
    for name in dirs:
        (dest / name).mkdir(parents=True, exist_ok=True)
    with open(pack / BLOB, "rb") as blob:
        for name, size, extents in files:
            path = dest / name
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.ftruncate(fd, size)  # a hole until written
                for offset, length, at in extents:
                    _copy(blob.fileno(), fd, at, offset, length)
            except ValueError as exc:
                raise ComposerError(f"packed folder {pack} is damaged: {exc}") from None
            finally:
                os.close(fd)


def unpack_limit() -> int:
    """The most bytes an unpacked folder may declare, ``$COMPOSER_MAX_UNPACK_BYTES`` or ``MAX_UNPACK``."""
    raw = os.environ.get(MAX_UNPACK_ENV, "").strip()
    if not raw:
        return MAX_UNPACK
    try:
        return int(raw)
    except ValueError:
        raise InputError(f"expected a number of bytes (got {raw!r})", field=MAX_UNPACK_ENV) from None


def _checked(pack: Path) -> tuple[list[str], list[tuple[str, int, list[tuple[int, int, int]]]]]:
    """The folders and files (name, size, extents) a pack's manifest declares, refused unless every name
    stays inside the folder, every extent lies inside its file and inside the blob, no two extents share
    blob bytes (a small pack must not unpack to many copies of one blob), and the sizes declared stay
    under ``unpack_limit``."""
    def bad(why: str) -> ComposerError:
        return ComposerError(f"packed folder {pack} is damaged or not Composer's: {why}")

    try:
        manifest = json.loads((pack / MANIFEST).read_text(encoding="utf-8"))
        blob_size = (pack / BLOB).stat().st_size
    except (OSError, ValueError) as exc:
        raise bad(f"{type(exc).__name__}: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise bad(f"{MANIFEST} is not of format {FORMAT}")
    try:
        dirs = [_inside(name) for name in manifest["dirs"]]
        files = [(_inside(e["path"]), _count(e["size"]), [(_count(o), _count(n), _count(a)) for o, n, a in
                                                          e["extents"]]) for e in manifest["files"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise bad(f"{MANIFEST} does not list files as packed: {type(exc).__name__}: {exc}") from None
    names = [name for name, _, _ in files]
    if len(set(names)) != len(names):
        raise bad("a file is listed twice")
    spans = sorted((at, at + length) for _, _, extents in files for _, length, at in extents)
    if any(hi > lo for (_, hi), (lo, _) in pairwise(spans)):
        raise bad("extents overlap in the packed data")
    if spans and spans[-1][1] > blob_size:
        raise bad(f"the packed data ends early ({blob_size} bytes, extents up to {spans[-1][1]})")
    for name, size, extents in files:
        if any(offset + length > size for offset, length, _ in extents):
            raise bad(f"an extent of {name} lies past its size")
    declared, limit = sum(size for _, size, _ in files), unpack_limit()
    if declared > limit:
        raise ComposerError(f"packed folder {pack} unpacks to {declared} bytes, more than the {limit} "
                            f"allowed: raise ${MAX_UNPACK_ENV} if it is yours and that large")
    return dirs, files


def _count(value: Any) -> int:
    """A manifest's size or offset: a non-negative integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{value!r} is not a size")
    return value


def _inside(name: Any) -> str:
    """A manifest's relative path, refused if it would leave the folder."""
    if not isinstance(name, str):
        raise ValueError(f"packed path {name!r} is not a path")
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
