"""Content-addressed embedding cache: one SQLite file shared by every run, study and worker process of a
machine, or tables in a PostgreSQL database shared by every machine of a cluster (``caches:``)."""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import numpy as np

from composer.errors import InputError
from composer.rdb_store import PostgresStore
from composer.store import SqliteStore
from composer.unicode import invalid_text

logger = logging.getLogger(__name__)

FILENAME = "embeddings.sqlite3"
# 16 KiB pages hold ~10 float32 vectors of 384 dims: the file stays within ~10% of the raw vector bytes,
# where SQLite's default 4 KiB pages waste a third (measured in benchmarks/bench_embedding.py).
_PAGE_SIZE = 16384
_LOOKUP_CHUNK = 500  # keys per "IN (...)" query, far below SQLite's bound-parameter limit
_BUSY_TIMEOUT_S = 120.0
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS {vectors} (key {blob} PRIMARY KEY, vector {blob} NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {models} (identity TEXT PRIMARY KEY, dim INTEGER NOT NULL)",
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
    """Vectors keyed by :func:`cache_key`, stored as raw float32 bytes in ``<path>/embeddings.sqlite3``,
    or, with ``caches`` (a PostgreSQL URL), in its tables ``composer_<folder name>_vectors`` and
    ``_models`` (the folder's name, ``embeddings`` or ``rerank``, tells the caches of a work dir apart).

    Shared by processes and threads through :class:`composer.store.SqliteStore` or
    :class:`composer.rdb_store.PostgresStore`. Inserts are ``ON CONFLICT DO NOTHING``: two workers that
    encode the same text race harmlessly, both vectors being the same.
    """

    def __init__(self, path: str | Path, *, caches: str | None = None) -> None:
        self.directory = Path(path)
        self.file = self.directory / FILENAME
        self._store: SqliteStore | PostgresStore
        if caches is None:
            self._tables = {"vectors": "vectors", "models": "models"}
            self._store = SqliteStore(self.file, _schema(self._tables, "BLOB"),
                                      busy_timeout_s=_BUSY_TIMEOUT_S, page_size=_PAGE_SIZE)
            self.where = str(self.file)
        else:
            prefix = "composer_" + re.sub(r"[^a-z0-9_]", "_", self.directory.name.lower())  # an identifier
            self._tables = {"vectors": f"{prefix}_vectors", "models": f"{prefix}_models"}
            self._store = PostgresStore(caches, _schema(self._tables, "BYTEA"))
            self.where = f"{self._store.where} ({self._tables['vectors']})"
        """What warnings name: the file, or the scrubbed URL and table."""

    def get_many(self, keys: Sequence[bytes], *, dim: int | None = None) -> dict[bytes, np.ndarray]:
        """The cached vectors among ``keys`` (read-only float32 arrays); absent keys are left out.

        A damaged row (bytes that are no whole float32 vector, of another length than ``dim`` when
        given, or holding a NaN or an infinity: a torn write, an edited table) is deleted with a warning
        and left out, so its text is encoded again."""
        found: dict[bytes, np.ndarray] = {}
        damaged: list[bytes] = []
        for start in range(0, len(keys), _LOOKUP_CHUNK):
            chunk = keys[start : start + _LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = self._store.query(
                f"SELECT key, vector FROM {self._tables['vectors']} WHERE key IN ({marks})", chunk
            )
            for key, blob in rows:
                vector = _vector(blob, dim)
                if vector is None:
                    damaged.append(key)
                else:
                    found[key] = vector
        if damaged:
            logger.warning("%s: %d damaged vectors (wrong length or not finite): dropped and encoded again",
                           self.where, len(damaged))
            self._store.execute_many(f"DELETE FROM {self._tables['vectors']} WHERE key = ?",
                                     [(key,) for key in damaged])
        return found

    def put_many(self, keys: Sequence[bytes], vectors: np.ndarray) -> None:
        """Store one row of ``vectors`` per key in a single transaction; existing keys are kept."""
        if len(keys) != len(vectors):
            raise ValueError(f"{len(keys)} keys for {len(vectors)} vectors")
        rows = np.ascontiguousarray(vectors, dtype=np.float32)
        # In key order: two PostgreSQL transactions inserting overlapping keys then wait on each other in
        # one order, never in a cycle (a deadlock, which PostgreSQL breaks by failing one of them).
        self._store.execute_many(
            f"INSERT INTO {self._tables['vectors']} (key, vector) VALUES (?, ?) ON CONFLICT DO NOTHING",
            sorted((key, row.tobytes()) for key, row in zip(keys, rows, strict=True)),
        )

    def model_dim(self, identity: str) -> int | None:
        """The dimension recorded for a model, so a fully cached run need not load the model to learn it."""
        rows = self._store.query(f"SELECT dim FROM {self._tables['models']} WHERE identity = ?", (identity,))
        return int(rows[0][0]) if rows else None

    def record_model_dim(self, identity: str, dim: int) -> None:
        self._store.execute(
            f"INSERT INTO {self._tables['models']} (identity, dim) VALUES (?, ?) ON CONFLICT DO NOTHING",
            (identity, dim),
        )

    def __len__(self) -> int:
        return int(self._store.query(f"SELECT COUNT(*) FROM {self._tables['vectors']}")[0][0])

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _schema(tables: dict[str, str], blob: str) -> tuple[str, ...]:
    return tuple(statement.format(blob=blob, **tables) for statement in _SCHEMA)


def _vector(blob: bytes, dim: int | None) -> np.ndarray | None:
    """The float32 vector ``blob`` holds; None when it is damaged (see ``EmbeddingCache.get_many``)."""
    if len(blob) % 4 or not blob or (dim is not None and len(blob) != 4 * dim):
        return None
    vector = np.frombuffer(blob, dtype=np.float32)
    return vector if np.isfinite(vector).all() else None
