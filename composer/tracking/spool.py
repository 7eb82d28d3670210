"""The spool: trial records the MLflow writer has not written yet, kept on disk until it has.

A study pickles each record into its own spool folder (atomic write) and the writer process
(``composer.tracking.writer``) deletes a file only once its run is written: records of a killed study, or
of a writer that died, are written when the study resumes (``Orphans``). Chunk tables are spooled once per
index, not per trial.

    <workdir>/spool/<study>/<host>-<pid>-<token>/000012-trial.pkl   (one folder per live tracker, locked)
    <workdir>/spool/<study>/tables/<index key>/{ids,doc_ids,texts}   (TextColumn files)
    <workdir>/spool/<study>/untraced/000007-trial.pkl   (written without traces, until the study ends)
"""

from __future__ import annotations

import io
import os
import pickle
import secrets
import shutil
import socket
from pathlib import Path
from typing import Any

from composer.data.columns import TextColumn
from composer.data.ranking import ChunkTable
from composer.files import write_atomic
from composer.locks import FileLock

TABLES = "tables"
TABLE_COLUMNS = ("ids", "doc_ids", "texts")
UNTRACED = "untraced"
"""Records of trials written without their MLflow traces, kept until the study ends (the leaders' traces
are written then)."""
OWNER_LOCK = ".owner.lock"
WRITER_LOCK = ".writer.lock"
"""A spool folder is held by its tracker (``<ident>.owner.lock``) and by the writer serving it
(``<ident>.writer.lock``): after the study dies, its writer may still be writing what it was sent, so a
folder is an orphan only when neither holds it."""




class Spool:
    """A study's spool folder (see the module docstring); ``owner`` is this process's own subfolder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tables = root / TABLES
        self.tables.mkdir(parents=True, exist_ok=True)
        ident = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self._lock = FileLock.create_held(root / f"{ident}{OWNER_LOCK}")
        self.owner = root / ident
        self.owner.mkdir()
        self._count = 0
        self._tables: set[str] = set()

    def put(self, kind: str, payload: Any) -> Path:
        """Pickle ``payload`` into a new file of this owner; chunk tables go to ``tables/`` by key."""
        self._count += 1
        path = self.owner / f"{self._count:06d}-{kind}.pkl"
        buffer = io.BytesIO()
        _Pickler(buffer, self).dump(payload)
        write_atomic(path, buffer.getvalue())
        return path

    def table(self, table: ChunkTable) -> None:
        """Spool ``table`` once under its key, as three ``TextColumn`` files the writer maps instead of
        loading: a 250,000-chunk table took it 0.6 GB as Python strings. Written into a folder of its own,
        then renamed into place: a table is whole or absent."""
        if table.key not in self._tables:
            folder = self.tables / table.key
            if not folder.exists():
                tmp = self.tables / f".{table.key}.{os.getpid()}.{secrets.token_hex(3)}"
                tmp.mkdir()
                try:
                    for name in TABLE_COLUMNS:
                        TextColumn.write(tmp / name, getattr(table, name))
                    os.rename(tmp, folder)
                except OSError:
                    if not folder.is_dir():  # else another worker spooled it first
                        raise
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
            self._tables.add(table.key)

    def release(self) -> None:
        """Drop this owner's folder if the writer emptied it, then its lock."""
        if not any(self.owner.iterdir()):
            shutil.rmtree(self.owner, ignore_errors=True)
            self._lock.path.unlink(missing_ok=True)
            self.owner.with_name(self.owner.name + WRITER_LOCK).unlink(missing_ok=True)
        self._lock.release()


class _Pickler(pickle.Pickler):
    """Chunk tables by reference (their key): written once under ``tables/``, shared by every trial."""

    def __init__(self, file: io.BytesIO, spool: Spool) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.spool = spool

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, ChunkTable) and obj.key:
            self.spool.table(obj)
            return ("chunk-table", obj.key)
        return None


class SpoolUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, tables: Path, cache: dict[str, ChunkTable]) -> None:
        super().__init__(file)
        self.tables = tables
        self.cache = cache

    def persistent_load(self, pid: Any) -> Any:
        kind, key = pid
        if kind != "chunk-table":
            raise pickle.UnpicklingError(f"unknown reference {pid!r}")
        if key not in self.cache:
            ids, doc_ids, texts = (TextColumn(self.tables / key / name) for name in TABLE_COLUMNS)
            self.cache[key] = ChunkTable(ids, doc_ids, texts, key=key)
        return self.cache[key]


class Orphans:
    """Spool folders of trackers that are gone, and their files: what a writer writes first. They are
    held (their locks taken) from here until ``release``, after they are written, so two writers starting
    together never both write them. A dead tracker's writer may still be writing what it was sent; it is
    waited for, so two writers never write one trial."""

    def __init__(self, root: Path) -> None:
        self.files: list[Path] = []
        self._held: list[tuple[Path, FileLock, FileLock]] = []
        if not root.is_dir():
            return
        for owner_path in sorted(root.glob(f"*{OWNER_LOCK}")):
            ident = owner_path.name.removesuffix(OWNER_LOCK)
            owner = FileLock(owner_path)
            if not owner.acquire(blocking=False):
                continue  # a live tracker's (its own writer handles it), or another writer adopted it
            writer = FileLock(root / f"{ident}{WRITER_LOCK}")
            writer.acquire()  # at once, or when the dead tracker's writer has written its queue
            folder = root / ident
            self.files.extend(sorted(folder.glob("*.pkl")) if folder.is_dir() else [])
            self._held.append((folder, owner, writer))

    def release(self) -> None:
        """Drop the folders left empty (and their lock files), then let go of every folder."""
        for folder, owner, writer in self._held:
            if not folder.is_dir() or not any(folder.glob("*.pkl")):
                shutil.rmtree(folder, ignore_errors=True)
                owner.path.unlink(missing_ok=True)
                writer.path.unlink(missing_ok=True)
            writer.release()
            owner.release()
        self._held = []
