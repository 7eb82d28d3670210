"""Content-addressed embedding cache: one SQLite file shared by every run, study and worker process."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import numpy as np

from composer.errors import InputError
from composer.store import SqliteStore
from composer.unicode import invalid_text

FILENAME = "embeddings.sqlite3"
# 16 KiB pages hold ~10 float32 vectors of 384 dims: the file stays within ~10% of the raw vector bytes,
# where SQLite's default 4 KiB pages waste a third (measured in benchmarks/bench_embedding.py).
_PAGE_SIZE = 16384
_LOOKUP_CHUNK = 500  # keys per "IN (...)" query, far below SQLite's bound-parameter limit
_BUSY_TIMEOUT_S = 120.0
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vector BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS models (identity TEXT PRIMARY KEY, dim INTEGER NOT NULL)",
)


def cache_key(identity: str, role: str, prefix: str, text: str) -> bytes:
    """blake2b-128 of (model identity, role, prefix, text); fields are length-prefixed, so never ambiguous.
    A lone surrogate (a question typed by a caller as ``"\\udcff"``) is an ``InputError`` naming it, not a
    ``UnicodeEncodeError`` from deep inside a search."""
    h = hashlib.blake2b(digest_size=16)
    try:
        for field in (identity, role, prefix):
            data = field.encode()
            h.update(len(data).to_bytes(4, "little"))
            h.update(data)
        h.update(text.encode())
    except UnicodeEncodeError as e:
        raise InputError(f"text to embed or rerank: {invalid_text(e.object)}") from None
    return h.digest()


class EmbeddingCache:
    """Vectors keyed by :func:`cache_key`, stored as raw float32 bytes in ``<path>/embeddings.sqlite3``.

    Shared by processes and threads through :class:`composer.store.SqliteStore`. Inserts are
    ``OR IGNORE``: two workers that encode the same text race harmlessly, both vectors being the same.
    """

    def __init__(self, path: str | Path) -> None:
        self.directory = Path(path)
        self.file = self.directory / FILENAME
        self._store = SqliteStore(self.file, _SCHEMA, busy_timeout_s=_BUSY_TIMEOUT_S, page_size=_PAGE_SIZE)

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, np.ndarray]:
        """The cached vectors among ``keys`` (read-only float32 arrays); absent keys are left out."""
        found: dict[bytes, np.ndarray] = {}
        for start in range(0, len(keys), _LOOKUP_CHUNK):
            chunk = keys[start : start + _LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = self._store.query(f"SELECT key, vector FROM vectors WHERE key IN ({marks})", chunk)
            found.update((key, np.frombuffer(blob, dtype=np.float32)) for key, blob in rows)
        return found

    def put_many(self, keys: Sequence[bytes], vectors: np.ndarray) -> None:
        """Store one row of ``vectors`` per key in a single transaction; existing keys are kept."""
        if len(keys) != len(vectors):
            raise ValueError(f"{len(keys)} keys for {len(vectors)} vectors")
        rows = np.ascontiguousarray(vectors, dtype=np.float32)
        self._store.execute_many(
            "INSERT OR IGNORE INTO vectors (key, vector) VALUES (?, ?)",
            ((key, row.tobytes()) for key, row in zip(keys, rows, strict=True)),
        )

    def model_dim(self, identity: str) -> int | None:
        """The dimension recorded for a model, so a fully cached run need not load the model to learn it."""
        rows = self._store.query("SELECT dim FROM models WHERE identity = ?", (identity,))
        return int(rows[0][0]) if rows else None

    def record_model_dim(self, identity: str, dim: int) -> None:
        self._store.execute("INSERT OR IGNORE INTO models (identity, dim) VALUES (?, ?)", (identity, dim))

    def __len__(self) -> int:
        return int(self._store.query("SELECT COUNT(*) FROM vectors")[0][0])

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
