"""Content-addressed embedding cache: one SQLite file shared by every run, study and worker process."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import numpy as np

FILENAME = "embeddings.sqlite3"
# 16 KiB pages hold ~10 float32 vectors of 384 dims: the file stays within ~10% of the raw vector bytes,
# where SQLite's default 4 KiB pages waste a third (measured in benchmarks/bench_embedding.py).
_PAGE_SIZE = 16384
_LOOKUP_CHUNK = 500  # keys per "IN (...)" query, far below SQLite's bound-parameter limit
_BUSY_TIMEOUT_S = 120.0


def cache_key(identity: str, role: str, prefix: str, text: str) -> bytes:
    """blake2b-128 of (model identity, role, prefix, text); fields are length-prefixed, so never ambiguous."""
    h = hashlib.blake2b(digest_size=16)
    for field in (identity, role, prefix):
        data = field.encode()
        h.update(len(data).to_bytes(4, "little"))
        h.update(data)
    h.update(text.encode())
    return h.digest()


class EmbeddingCache:
    """Vectors keyed by :func:`cache_key`, stored as raw float32 bytes in ``<path>/embeddings.sqlite3``.

    WAL mode lets readers work while one process writes, and the busy timeout makes concurrent writers
    (several study workers) queue instead of failing. Inserts are ``OR IGNORE``: two workers that encode
    the same text race harmlessly, both vectors being the same. A connection is opened per process, so
    an instance survives a fork.
    """

    def __init__(self, path: str | Path) -> None:
        self.directory = Path(path)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.file = self.directory / FILENAME
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._connection()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            conn = sqlite3.connect(
                self.file, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            conn.execute(f"PRAGMA page_size={_PAGE_SIZE}")  # only takes effect on a new, empty file
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vector BLOB NOT NULL)")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS models (identity TEXT PRIMARY KEY, dim INTEGER NOT NULL)"
            )
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, np.ndarray]:
        """The cached vectors among ``keys`` (read-only float32 arrays); absent keys are left out."""
        found: dict[bytes, np.ndarray] = {}
        with self._lock:
            conn = self._connection()
            for start in range(0, len(keys), _LOOKUP_CHUNK):
                chunk = keys[start : start + _LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))
                rows = conn.execute(f"SELECT key, vector FROM vectors WHERE key IN ({marks})", chunk)
                for key, blob in rows:
                    found[key] = np.frombuffer(blob, dtype=np.float32)
        return found

    def put_many(self, keys: Sequence[bytes], vectors: np.ndarray) -> None:
        """Store one row of ``vectors`` per key in a single transaction; existing keys are kept."""
        if len(keys) != len(vectors):
            raise ValueError(f"{len(keys)} keys for {len(vectors)} vectors")
        rows = np.ascontiguousarray(vectors, dtype=np.float32)
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "INSERT OR IGNORE INTO vectors (key, vector) VALUES (?, ?)",
                    ((key, row.tobytes()) for key, row in zip(keys, rows, strict=True)),
                )
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def model_dim(self, identity: str) -> int | None:
        """The dimension recorded for a model, so a fully cached run need not load the model to learn it."""
        with self._lock:
            query = "SELECT dim FROM models WHERE identity = ?"
            row = self._connection().execute(query, (identity,)).fetchone()
        return None if row is None else int(row[0])

    def record_model_dim(self, identity: str, dim: int) -> None:
        with self._lock:
            query = "INSERT OR IGNORE INTO models (identity, dim) VALUES (?, ?)"
            self._connection().execute(query, (identity, dim))

    def __len__(self) -> int:
        with self._lock:
            return int(self._connection().execute("SELECT COUNT(*) FROM vectors").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
