"""From questions to a Ranking over one index: [expand] -> branch candidates -> [fuse] -> [rerank] -> top k.

Every stage reads memoized inputs (candidates per query, expansions per question), so a trial that
differs from an earlier one only in k, fusion, weights or reranker issues no Qdrant query at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from composer.data.ranking import NONE, ChunkTable, Ranking, trec_sorted
from composer.data.types import Hit, Question
from composer.retrieval.candidates import CandidateStore, Lists, Search
from composer.retrieval.config import RetrievalConfig
from composer.retrieval.expansion import Expansion, QueryExpander
from composer.retrieval.fusion import Items, Scores, fuse_hybrid, fuse_rrf
from composer.retrieval.rerank import Reranker

Latency = dict[str, npt.NDArray[np.float64]]
"""Seconds per question per stage ("expand", "retrieve", "rerank")."""


@dataclass(frozen=True)
class Branches:
    """How to search one index's two branches for a batch of query texts, and the memo slot of each:
    ``dense(texts, depth)`` and ``bm25(texts, depth)`` return each query's (table position, score) hits.
    ``hyde(expansions)`` gives the dense search for their HyDE vectors (question mixed with passage),
    taking the memo keys ``_hyde_key`` makes."""

    table: ChunkTable
    dense_slot: tuple[str, ...] | None
    bm25_slot: tuple[str, ...]
    dense: Search | None
    bm25: Search
    hyde: Callable[[Sequence[Expansion]], Search] | None = None


class Retriever:
    """Ranks questions for one pipeline's retrieval, rerank and expansion settings over one index."""

    def __init__(
        self,
        settings: RetrievalConfig,
        branches: Branches,
        store: CandidateStore,
        *,
        reranker: Reranker,
        reranks: bool,
        expander: QueryExpander | None,
        rrf_k_expansion: int,
        floor: int = 0,
    ) -> None:
        self.settings = settings
        self.branches = branches
        self.store = store
        self.reranker = reranker
        self.reranks = reranks
        self.expander = expander
        self.rrf_k_expansion = rrf_k_expansion
        self.floor = floor

    @property
    def depth(self) -> int:
        """First-stage depth: k, or the prefetch a reranker chooses from."""
        r = self.settings
        return max(r.k, r.prefetch) if self.reranks else r.k

    def rank(self, questions: Sequence[Question]) -> tuple[Ranking, Latency]:
        n = len(questions)
        texts = [q.question for q in questions]
        latency: Latency = {}
        if self.expander is not None:
            started = time.perf_counter()
            expansions = self.expander.expand_many(texts)
            latency["expand"] = np.full(n, (time.perf_counter() - started) / max(n, 1))
            items, scores, seconds = self._expanded(expansions)
        else:
            items, scores, seconds = self._first_stage(texts, self.depth)
        latency["retrieve"] = seconds
        table = self.branches.table
        if self.reranks:
            started = time.perf_counter()
            items, scores = self._rerank(texts, items, scores)
            latency["rerank"] = np.full(n, (time.perf_counter() - started) / max(n, 1))
        k = self.settings.k
        return Ranking(tuple(q.id for q in questions), items[:, :k], scores[:, :k], table), latency

    def _first_stage(
        self, texts: list[str], depth: int, hyde: tuple[list[str], Search] | None = None
    ) -> tuple[Items, Scores, npt.NDArray[np.float64]]:
        """Each text's top ``depth``, from the memoized branch lists; ``hyde`` (memo keys, search) replaces
        the dense branch's queries. Fusion and slicing are timed and added to the searches' own cost."""
        r, b = self.settings, self.branches
        started = time.perf_counter()
        if r.mode == "bm25":
            lists = self._lists("bm25", texts, depth)
            items, scores, seconds = lists.items, lists.scores, lists.seconds
        elif r.mode == "dense":
            lists = self._lists("dense", texts, depth, hyde)
            items, scores, seconds = lists.items, lists.scores, lists.seconds
        else:  # hybrid: each branch cut at its prefetch (Qdrant's limit = max(prefetch, k)), then fused
            p = max(r.prefetch, depth)
            d, s = self._lists("dense", texts, p, hyde), self._lists("bm25", texts, p)
            items, scores = fuse_hybrid(
                (d.items, d.scores),
                (s.items, s.scores),
                b.table,
                method=r.fusion,
                limit=depth,
                rrf_k=r.rrf_k,
                normalization=r.normalization,
                weight=r.weight,
            )
            seconds = d.seconds + s.seconds
        own = (time.perf_counter() - started) / max(len(texts), 1)
        return items, scores, seconds + own

    def _lists(
        self, branch: str, texts: list[str], need: int, hyde: tuple[list[str], Search] | None = None
    ) -> Lists:
        b = self.branches
        if branch == "bm25":
            return self.store.lists(b.bm25_slot, texts, need, b.bm25, b.table, self.floor)
        if b.dense is None or b.dense_slot is None:
            raise ValueError("this index has no dense vectors")
        if hyde is not None:
            keys, search = hyde
            return self.store.lists((*b.dense_slot, "hyde"), keys, need, search, b.table, self.floor)
        return self.store.lists(b.dense_slot, texts, need, b.dense, b.table, self.floor)

    def _expanded(self, expansions: list[Expansion]) -> tuple[Items, Scores, npt.NDArray[np.float64]]:
        """Multi-query: every query's list, fused per question by RRF. HyDE: the dense branch searched
        with the question's vector mixed with its hypothetical passage's (BM25 keeps the question)."""
        depth = self.depth
        if self.expander is not None and self.expander.method == "hyde":
            hyde = self.branches.hyde
            if hyde is None:
                raise ValueError("HyDE needs dense vectors")
            keys = [_hyde_key(e) for e in expansions]
            return self._first_stage([e.question for e in expansions], depth, (keys, hyde(expansions)))
        width = max(len(e.queries) for e in expansions)
        flat = [q for e in expansions for q in e.queries]
        items, scores, seconds = self._first_stage(flat, depth)
        rows: list[tuple[Items, Scores]] = []
        starts = np.cumsum([0, *(len(e.queries) for e in expansions)])[:-1]
        for j in range(width):  # the j-th query of every question (padding where it has fewer)
            has = np.array([len(e.queries) > j for e in expansions])
            pick = np.where(has, starts + j, 0)
            rows.append(
                (np.where(has[:, None], items[pick], NONE), np.where(has[:, None], scores[pick], 0.0))
            )
        fused_items, fused_scores = fuse_rrf(rows, self.branches.table, k=self.rrf_k_expansion, limit=depth)
        per_question = np.add.reduceat(seconds, starts) if len(flat) else np.zeros(len(expansions))
        return fused_items, fused_scores, per_question

    def _rerank(self, texts: list[str], items: Items, scores: Scores) -> tuple[Items, Scores]:
        table = self.branches.table
        candidates = [_hits(table, items[i], scores[i]) for i in range(len(texts))]
        reranked = self.reranker.rerank(texts, candidates, self.settings.k)
        depth = max((len(h) for h in reranked), default=0)
        out_items = np.full((len(texts), depth), NONE, dtype=np.int64)
        out_scores = np.zeros((len(texts), depth), dtype=np.float64)
        for i, hits in enumerate(reranked):
            out_items[i, : len(hits)] = [table.position[h.id] for h in hits]
            out_scores[i, : len(hits)] = [h.score for h in hits]
        return trec_sorted(out_items, out_scores, table)


def _hits(table: ChunkTable, items: Items, scores: Scores) -> list[Hit]:
    return [
        Hit(table.ids[i], s, table.texts[i], table.doc_ids[i])
        for i, s in zip(items.tolist(), scores.tolist(), strict=True)
        if i != NONE
    ]


def _hyde_key(expansion: Expansion) -> str:
    """The memo key of a HyDE query: the question and the passage its vector was mixed with."""
    return "\x00".join((expansion.question, *expansion.passages))
