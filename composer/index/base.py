"""What every Qdrant backend offers: one collection per index key, dense + BM25 vectors, fusion inside Qdrant.

A collection holds, per chunk, a named dense vector ``"dense"`` (cosine; absent for BM25-only indexes), a
sparse vector ``"bm25"`` with Qdrant's IDF modifier (see ``composer.index.bm25``) and the payload
``chunk_id, doc_id, start, end`` (and ``text`` on a server, for its other readers). Building is ``create``
→ ``upsert``… → ``finish``; only a finished collection ``exists``, so a build that crashed half-way is
rebuilt rather than reused. A finished collection whose files no longer read back as built raises
``IndexDamaged`` (``composer.pipeline.indexing`` then rebuilds it).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

import numpy as np

from composer.errors import ComposerError
from composer.index.bm25 import SparseVector


@dataclass(frozen=True)
class IndexInfo:
    """An index a pipeline searches: its key, what it holds, whether it was built now or reused, what
    encoding cost. A trial's record keeps it as it is (``composer.record.TrialRecord.index``)."""

    key: str
    n_documents: int
    n_chunks: int
    reused: bool
    embeddings_computed: int
    embeddings_reused: int
    seconds: float


class IndexBuildLost(ComposerError):
    """A collection being built was dropped or rebuilt by another worker before this build finished."""


class IndexDamaged(ComposerError):
    """A finished collection that does not read back as it was built: ``where`` it is, and ``reason``."""

    def __init__(self, where: str, reason: str) -> None:
        self.where = where
        self.reason = reason
        super().__init__(f"index {where} is unusable: {reason}")


DENSE = "dense"
SPARSE = "bm25"
Fusion = Literal["rrf", "dbsf"]

UPSERT_BATCH = 256
QUERY_BATCH = 256
_NAMESPACE_BYTES = uuid.uuid5(uuid.NAMESPACE_URL, "composer/index/point").bytes

T = TypeVar("T")
Point = tuple[str, dict[str, Any], dict[str, Any]]
"""(point id, vectors by name, payload): what both bindings build their point type from."""
Found = list[tuple[str, float]]
"""One query's result: (point id, score) best first. No payload is read back: a search's chunks are
known to the caller by point id (``point_id``), which keeps Qdrant's per-query cost to the search itself."""


class ChunkLike(Protocol):
    """What an index stores of a chunk (``composer.chunking.Chunk`` fits)."""

    @property
    def id(self) -> str: ...
    @property
    def doc_id(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...


@runtime_checkable
class VectorIndex(Protocol):
    """A place to keep and search collections; ``EdgeBackend`` and ``ClientBackend`` implement it."""

    local: bool
    """Whether its collections belong to one work dir (Edge, ``:memory:``), so were built from its embedding
    cache alone; a server's are shared by workers whose caches were filled apart, on machines that may
    encode one text to other last bits."""

    def exists(self, name: str) -> bool:
        """True only for a collection whose build finished."""
        ...

    def create(self, name: str, dim: int | None, meta: dict[str, Any]) -> None:
        """Start a (re)build: drops whatever ``name`` holds. ``dim=None`` makes a BM25-only collection."""
        ...

    def upsert(
        self,
        name: str,
        chunks: Sequence[ChunkLike],
        dense: np.ndarray | None,
        sparse: Sequence[SparseVector] | None,
    ) -> None:
        """Add chunks with their vectors (row i belongs to chunk i), sent in batches."""
        ...

    def finish(self, name: str) -> None:
        """Mark the build complete (and optimize where it pays): from now on ``exists(name)``."""
        ...

    def drop(self, name: str) -> None: ...

    def count(self, name: str) -> int: ...

    def meta(self, name: str) -> dict[str, Any]:
        """The metadata given to ``create`` (BM25 stats, config, ...), as persisted."""
        ...

    def where(self, name: str) -> str:
        """Where collection ``name`` lives, for messages: its directory, or its name and server."""
        ...

    def scan(
        self, name: str, dense: np.ndarray | None, sparse: SparseVector
    ) -> tuple[Found | None, Found]:
        """Every point's score for one dense query (None: no dense search) and one sparse query, searched
        exhaustively (a sparse search finds the points sharing a term with the query): how a collection is
        checked against the vectors it was built from before it is reused."""
        ...

    def search_dense(self, name: str, queries: np.ndarray, k: int) -> list[Found]: ...

    def search_bm25(self, name: str, queries: Sequence[SparseVector], k: int) -> list[Found]: ...

    def search_hybrid(
        self,
        name: str,
        dense: np.ndarray,
        sparse: Sequence[SparseVector],
        k: int,
        *,
        fusion: Fusion = "rrf",
        prefetch: int = 50,
        rrf_k: int = 60,
    ) -> list[Found]:
        """Top ``prefetch`` of each branch, fused by Qdrant (RRF or DBSF) into the top ``k``: the reference
        that ``composer.retrieval.fusion`` is tested against (trials fuse cached branch lists themselves)."""
        ...

    def close(self) -> None: ...


def point_id(chunk_id: str) -> str:
    """uuid5 of the chunk id: re-upserting a chunk overwrites it, batches need no shared counter.

    ``str(uuid.uuid5(namespace, chunk_id))`` computed without the ``UUID`` object, ~3x faster: a
    million-chunk corpus needs two million of them (its upsert and its handle's point table)."""
    digest = bytearray(hashlib.sha1(_NAMESPACE_BYTES + chunk_id.encode("utf-8")).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def payload(chunk: ChunkLike, *, text: bool = True) -> dict[str, Any]:
    """Where a point comes from, and with ``text`` the chunk's text (for other readers of a server's
    collection; Composer itself reads none of it back)."""
    data: dict[str, Any] = {"chunk_id": chunk.id, "doc_id": chunk.doc_id, "start": chunk.start,
                            "end": chunk.end}
    if text:
        data["text"] = chunk.text
    return data


def batched(items: list[T], size: int) -> Iterator[list[T]]:
    for lo in range(0, len(items), size):
        yield items[lo : lo + size]


def point_batches(
    chunks: Sequence[ChunkLike],
    dense: np.ndarray | None,
    sparse: Sequence[SparseVector] | None,
    sparse_type: Callable[[SparseVector], Any],
    *,
    text: bool = True,
) -> Iterator[list[Point]]:
    """The points of an upsert, checked at once and built one batch of ``UPSERT_BATCH`` at a time (a
    whole corpus as Python float lists would not fit); ``sparse_type`` makes the binding's sparse vector,
    ``text`` puts the chunk's text in the payload.

    Rows must line up with chunks: a silent misalignment would index vectors under the wrong text.
    """
    if dense is None and sparse is None:
        raise ValueError("upsert needs dense or sparse vectors")
    if dense is not None and (dense.ndim != 2 or len(dense) != len(chunks)):
        raise ValueError(f"dense has shape {dense.shape}, expected ({len(chunks)}, dim)")
    if sparse is not None and len(sparse) != len(chunks):
        raise ValueError(f"{len(sparse)} sparse vectors for {len(chunks)} chunks")
    return (_points(lo, chunks, dense, sparse, sparse_type, text)
            for lo in range(0, len(chunks), UPSERT_BATCH))


def _points(
    lo: int,
    chunks: Sequence[ChunkLike],
    dense: np.ndarray | None,
    sparse: Sequence[SparseVector] | None,
    sparse_type: Callable[[SparseVector], Any],
    text: bool,
) -> list[Point]:
    """The batch of points starting at chunk ``lo``."""
    hi = min(lo + UPSERT_BATCH, len(chunks))
    rows = dense[lo:hi].astype(np.float32).tolist() if dense is not None else None
    points: list[Point] = []
    for i in range(lo, hi):
        vector: dict[str, Any] = {}
        if rows is not None:
            vector[DENSE] = rows[i - lo]
        if sparse is not None:
            vector[SPARSE] = sparse_type(sparse[i])
        points.append((point_id(chunks[i].id), vector, payload(chunks[i], text=text)))
    return points


def query_rows(queries: np.ndarray) -> list[list[float]]:
    """Query matrix as float32 lists, the form both Qdrant bindings take."""
    if queries.ndim != 2:
        raise ValueError(f"query vectors must be a 2-d array, got shape {queries.shape}")
    rows: list[list[float]] = queries.astype(np.float32).tolist()
    return rows


def hybrid_queries(
    dense: np.ndarray, sparse: Sequence[SparseVector]
) -> list[tuple[list[float], SparseVector]]:
    """(dense row, sparse vector) per query: the two halves of one hybrid query must pair up."""
    if len(dense) != len(sparse):
        raise ValueError(f"{len(dense)} dense and {len(sparse)} sparse queries")
    return list(zip(query_rows(dense), sparse, strict=True))


def require_dense(name: str, state: Mapping[str, Any] | None) -> None:
    """A dense search on a BM25-only collection is a caller's mistake, not an empty result."""
    if state is not None and not state["dim"]:
        raise ValueError(f"index {name!r} is BM25-only: it has no dense vectors")
