"""Second-stage ordering of retrieved chunks: a cross-encoder, MMR for diversity, or nothing."""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from composer.data.types import Hit
from composer.embedding import CachedEmbedder, EmbeddingCache, cache_key
from composer.embedding.config import Device
from composer.embedding.sbert import (
    hub_commit,
    local_model_digest,
    quiet_transformers_loading,
    resolve_device,
)
from composer.errors import ComposerError
from composer.retrieval.config import RerankConfig

if TYPE_CHECKING:
    from composer.llm.client import LLMClient
    from composer.retrieval.llm_rerank import LLMReranker


class Reranker(Protocol):
    def rerank(self, queries: Sequence[str], candidates: Sequence[list[Hit]], k: int) -> list[list[Hit]]:
        """Reorder each query's candidates and keep the best ``k``."""
        ...


class NoReranker:
    def rerank(self, queries: Sequence[str], candidates: Sequence[list[Hit]], k: int) -> list[list[Hit]]:
        return [list(hits[:k]) for hits in candidates]


class CrossEncoderReranker:
    """sentence-transformers CrossEncoder scores; every (query, passage) score is cached on disk.

    Scores live in the same content-addressed store as embeddings (a 1-float "vector" per pair), so a
    repeated configuration or a resumed study never scores a pair twice.
    """

    def __init__(
        self, model: str, cache: EmbeddingCache, *, batch_size: int = 32, device: Device = "cpu"
    ) -> None:
        expanded = os.path.expanduser(model)
        self._local = Path(expanded).resolve() if os.path.isdir(expanded) else None
        self._name = model
        self._cache = cache
        self._batch_size = batch_size
        self._device = device
        self._model: Any = None
        self._identity: str | None = None
        self._commit: str | None = None
        self.computed = 0
        self.reused = 0

    @property
    def identity(self) -> str:
        """Model name pinned to its weights (content digest or hub commit), like an embedder's: an updated
        model never gets served scores cached for the old one. Resolved on first use, not at construction."""
        if self._identity is None:
            if self._local is not None:
                self._identity = f"cross-encoder:{self._local.name}@{local_model_digest(self._local)}"
            else:
                self._identity = f"cross-encoder:{self._name}@{self._hub_commit()}"
        return self._identity

    def _hub_commit(self) -> str:
        if self._commit is None:
            self._commit = hub_commit(self._name)
        return self._commit

    def _load(self) -> Any:
        if self._model is None:
            from sentence_transformers import CrossEncoder

            quiet: AbstractContextManager[None]
            if self._local is not None:
                # ST 6 wants a str path; a local load's "Loading weights" bar would tear through the CLI's.
                source, revision, quiet = str(self._local), None, quiet_transformers_loading()
            else:  # loaded at the very commit the identity names
                source, revision, quiet = self._name, self._hub_commit(), nullcontext()
            try:
                with quiet:
                    self._model = CrossEncoder(
                        source,
                        device=resolve_device(self._device, "rerank.device"),
                        revision=revision,
                        local_files_only=self._local is not None,
                    )
            except Exception as exc:
                raise ComposerError(f"cannot load cross-encoder '{self._name}': {exc}") from exc
        return self._model

    def scores(self, query: str, passages: Sequence[str]) -> np.ndarray:
        keys = [cache_key(self.identity, "pair", query, p) for p in passages]
        found = self._cache.get_many(keys)
        missing = [i for i, key in enumerate(keys) if key not in found]
        if missing:
            pairs = [(query, passages[i]) for i in missing]
            raw = self._load().predict(pairs, batch_size=self._batch_size, show_progress_bar=False)
            fresh = np.asarray(raw, dtype=np.float32).reshape(-1, 1)
            self._cache.put_many([keys[i] for i in missing], fresh)
            found.update({keys[i]: fresh[j] for j, i in enumerate(missing)})
        self.computed += len(missing)
        self.reused += len(keys) - len(missing)
        return np.array([float(found[key][0]) for key in keys], dtype=np.float64)

    def rerank(self, queries: Sequence[str], candidates: Sequence[list[Hit]], k: int) -> list[list[Hit]]:
        out = []
        for query, hits in zip(queries, candidates, strict=True):
            scores = self.scores(query, [h.text or "" for h in hits])
            order = np.argsort(-scores, kind="stable")[:k]
            out.append([replace(hits[i], score=float(scores[i])) for i in order])
        return out


class MmrReranker:
    """Maximal marginal relevance: the first stage's relevance minus redundancy with the chunks chosen.

    Relevance is the retriever's own score, min-max scaled per query, so MMR diversifies BM25 and hybrid
    rankings instead of replacing them with dense similarity; redundancy is the cosine between chunk
    embeddings. ``lam`` = 1 keeps the retriever's order; lower values trade relevance for diversity,
    which helps when overlapping chunks of one paragraph would otherwise fill the top k.

    Its scores are the MMR order itself (k for the first pick down to 1), since a ranking is kept sorted
    by score.
    """

    def __init__(self, embedder: CachedEmbedder, lam: float) -> None:
        self._embedder = embedder
        self._lam = lam

    def rerank(self, queries: Sequence[str], candidates: Sequence[list[Hit]], k: int) -> list[list[Hit]]:
        out: list[list[Hit]] = []
        for hits in candidates:
            if not hits:
                out.append([])
                continue
            docs = self._embedder.encode_passages([h.text or "" for h in hits])
            relevance = _min_max([h.score for h in hits])
            order = mmr_order(relevance, docs, self._lam, k)
            # Scores that keep MMR's order wherever the ranking is re-sorted by score (as metrics do).
            out.append([replace(hits[i], score=float(len(order) - rank)) for rank, i in enumerate(order)])
        return out


def _min_max(scores: Sequence[float]) -> np.ndarray:
    values = np.asarray(scores, dtype=np.float64)
    span = float(values.max() - values.min())
    return (values - values.min()) / span if span > 0 else np.ones_like(values)


def mmr_order(relevance: np.ndarray, docs: np.ndarray, lam: float, k: int) -> list[int]:
    """Indices of ``docs`` (unit vectors, so dot product is cosine) in MMR order for the given relevance."""
    similarity = docs @ docs.T
    chosen: list[int] = []
    remaining = list(range(len(docs)))
    while remaining and len(chosen) < k:
        redundancy = similarity[np.ix_(remaining, chosen)].max(axis=1) if chosen else np.zeros(len(remaining))
        gains = lam * relevance[remaining] - (1.0 - lam) * redundancy
        best = remaining[int(np.argmax(gains))]
        chosen.append(best)
        remaining.remove(best)
    return chosen


class LLMRerank:
    """The LLM reranker (``composer.retrieval.llm_rerank.LLMReranker``) as a pipeline stage: one concurrent
    batch of calls per block of queries, failures keeping the retriever's order."""

    def __init__(self, reranker: LLMReranker) -> None:
        self._reranker = reranker

    def rerank(self, queries: Sequence[str], candidates: Sequence[list[Hit]], k: int) -> list[list[Hit]]:
        ranked = self._reranker.rerank_many(list(zip(queries, candidates, strict=True)))
        return [hits[:k] for hits in ranked]


def make_reranker(
    cfg: RerankConfig,
    *,
    cache: EmbeddingCache,
    embedder: CachedEmbedder | None,
    llm: LLMClient | None = None,
) -> Reranker:
    if cfg.method == "llm":
        if llm is None:
            raise ComposerError("rerank 'llm' needs an LLM client: set generation.model or rerank.model")
        from composer.retrieval.llm_rerank import LLMReranker

        return LLMRerank(LLMReranker(llm, cfg.mode, cfg.top_n))
    if cfg.method == "cross-encoder":
        assert cfg.model is not None  # enforced by RerankConfig
        return CrossEncoderReranker(cfg.model, cache, batch_size=cfg.batch_size, device=cfg.device)
    if cfg.method == "mmr":
        if embedder is None:
            raise ComposerError("rerank 'mmr' needs an embedding model")
        return MmrReranker(embedder, cfg.mmr_lambda)
    return NoReranker()
