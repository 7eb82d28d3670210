"""The searches of an open index, as the retriever's branches: Qdrant finds the candidates, the handle's
exact vectors score them (see ``composer.pipeline.indexing``), and HyDE's passages shape the dense query."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from composer.embedding import CachedEmbedder
from composer.index import VectorIndex
from composer.pipeline.indexing import IndexHandle
from composer.retrieval.candidates import Search
from composer.retrieval.expansion import Expansion
from composer.retrieval.retriever import Branches


def _rescored(scores: np.ndarray, items: list[int]) -> list[tuple[int, float]]:
    return list(zip(items, scores.tolist(), strict=True))


def index_branches(handle: IndexHandle, backend: VectorIndex, embedder: CachedEmbedder | None) -> Branches:
    """The two searches of ``handle``'s index in ``backend``; without ``embedder`` (a BM25-only index:
    ``handle.dim`` None) only the BM25 one."""
    points, exact = handle.points, handle.exact

    def bm25(texts: list[str], depth: int) -> list[list[tuple[int, float]]]:
        queries = handle.bm25.encode_queries(texts, exact.column)
        found = backend.search_bm25(handle.key, queries, depth)
        out = [_rescored(exact.rescore_bm25(q, items := [points[pid] for pid, _ in hits]), items)
               for q, hits in zip(queries, found, strict=True)]
        exact.release()  # a batch's candidates touch most pages of a large index's vectors
        return out

    if embedder is None:
        return Branches(handle.table, None, (handle.key, "bm25"), None, bm25)

    def search_dense(vectors: np.ndarray, depth: int) -> list[list[tuple[int, float]]]:
        found = backend.search_dense(handle.key, vectors, depth)
        out = [_rescored(exact.rescore_dense(v, items := [points[pid] for pid, _ in hits]), items)
               for v, hits in zip(vectors, found, strict=True)]
        exact.release()
        return out

    def dense(texts: list[str], depth: int) -> list[list[tuple[int, float]]]:
        return search_dense(embedder.encode_queries(texts), depth)

    def hyde(expansions: Sequence[Expansion]) -> Search:
        by_key = {"\x00".join((e.question, *e.passages)): e for e in expansions}
        return lambda keys, depth: search_dense(hyde_vectors(embedder, [by_key[k] for k in keys]), depth)

    slot = (handle.key, "dense", embedder.query_prefix)
    return Branches(handle.table, slot, (handle.key, "bm25"), dense, bm25, hyde)


def hyde_vectors(embedder: CachedEmbedder, expansions: Sequence[Expansion]) -> np.ndarray:
    """HyDE: the mean of the question's vector and its hypothetical passages' vectors, unit length."""
    vectors = np.array(embedder.encode_queries([e.question for e in expansions]), dtype=np.float32)
    passages = [p for e in expansions for p in e.passages]
    if passages:
        encoded = iter(embedder.encode_passages(passages))
        for i, e in enumerate(expansions):
            if e.passages:
                mean = np.mean([vectors[i], *(next(encoded) for _ in e.passages)], axis=0)
                vectors[i] = mean / (np.linalg.norm(mean) or 1.0)
    return vectors
