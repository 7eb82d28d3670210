"""The searches of an open index, as the retriever's branches: Qdrant finds the candidates, the handle's
exact vectors score them (see ``composer.pipeline.indexing``); a searched query's weighted parts
(``composer.retrieval.conversation``) and HyDE's passages shape the query vectors."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from composer.embedding import CachedEmbedder
from composer.index import VectorIndex
from composer.index.bm25 import SparseVector
from composer.pipeline.indexing import IndexHandle
from composer.retrieval.candidates import Search
from composer.retrieval.conversation import SearchedQuery
from composer.retrieval.expansion import Expansion
from composer.retrieval.retriever import Branches


def _rescored(scores: np.ndarray, items: list[int]) -> list[tuple[int, float]]:
    return list(zip(items, scores.tolist(), strict=True))


def index_branches(handle: IndexHandle, backend: VectorIndex, embedder: CachedEmbedder | None) -> Branches:
    """The two searches of ``handle``'s index in ``backend``; without ``embedder`` (a BM25-only index:
    ``handle.dim`` None) only the BM25 one."""
    points, exact = handle.points, handle.exact

    def bm25(searched: list[SearchedQuery], depth: int) -> list[list[tuple[int, float]]]:
        queries = sparse_queries(handle, searched)
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

    def dense(searched: list[SearchedQuery], depth: int) -> list[list[tuple[int, float]]]:
        return search_dense(query_vectors(embedder, searched), depth)

    def hyde(pairs: Sequence[tuple[SearchedQuery, Expansion]]) -> Search:
        by_key = {"\x00".join((q.key, *e.passages)): (q, e) for q, e in pairs}
        return lambda keys, depth: search_dense(hyde_vectors(embedder, [by_key[k] for k in keys]), depth)

    slot = (handle.key, "dense", embedder.query_prefix)
    return Branches(handle.table, slot, (handle.key, "bm25"), dense, bm25, hyde)


def sparse_queries(handle: IndexHandle, searched: Sequence[SearchedQuery]) -> list[SparseVector]:
    """BM25 query vectors: each part's tokens weighted by its share (a token in several parts sums their
    shares); a plain query is 1.0 per token, as ``Bm25Encoder.encode_queries`` makes it."""
    parts = [text for q in searched for text, _ in q.parts]
    encoded = iter(handle.bm25.encode_queries(parts, handle.exact.column))
    out = []
    for q in searched:
        if not q.weighted:
            out.append(next(encoded))
            continue
        weights: dict[int, float] = {}
        for _, share in q.parts:
            for token in next(encoded).indices:
                weights[token] = weights.get(token, 0.0) + share
        tokens = sorted(weights)
        out.append(SparseVector(tokens, [weights[t] for t in tokens]))
    return out


def query_vectors(embedder: CachedEmbedder, searched: Sequence[SearchedQuery]) -> np.ndarray:
    """Dense query vectors: a plain query's own; a weighted one's, the unit-length sum of its parts' unit
    vectors, each scaled by its share (every part is embedded as a query, through the cache)."""
    parts = [text for q in searched for text, _ in q.parts]
    encoded = np.array(embedder.encode_queries(parts), dtype=np.float32)
    if not any(q.weighted for q in searched):
        return encoded
    vectors = np.zeros((len(searched), encoded.shape[1]), dtype=np.float32)
    row = 0
    for i, q in enumerate(searched):
        own = encoded[row: row + len(q.parts)]
        row += len(q.parts)
        if not q.weighted:
            vectors[i] = own[0]
            continue
        units = own / np.maximum(np.linalg.norm(own, axis=1, keepdims=True), 1e-12)
        mixed = (units * np.array([share for _, share in q.parts], dtype=np.float32)[:, None]).sum(axis=0)
        vectors[i] = mixed / (np.linalg.norm(mixed) or 1.0)
    return vectors


def hyde_vectors(embedder: CachedEmbedder, pairs: Sequence[tuple[SearchedQuery, Expansion]]) -> np.ndarray:
    """HyDE: the mean of the searched query's vector and its hypothetical passages' vectors, unit length."""
    vectors = query_vectors(embedder, [q for q, _ in pairs])
    expansions = [e for _, e in pairs]
    passages = [p for e in expansions for p in e.passages]
    if passages:
        encoded = iter(embedder.encode_passages(passages))
        for i, e in enumerate(expansions):
            if e.passages:
                mean = np.mean([vectors[i], *(next(encoded) for _ in e.passages)], axis=0)
                vectors[i] = mean / (np.linalg.norm(mean) or 1.0)
    return vectors
