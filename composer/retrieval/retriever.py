"""From questions to a Ranking over one index: [conversation] -> [expand] -> branch candidates -> [fuse] ->
[rerank] -> top k.

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
from composer.data.types import Hit, Question, StageError
from composer.retrieval.candidates import CandidateStore, Lists, Search
from composer.retrieval.config import RetrievalConfig
from composer.retrieval.conversation import ConversationStage, SearchedQuery
from composer.retrieval.expansion import Expansion, QueryExpander
from composer.retrieval.fusion import Items, Scores, fuse_hybrid, fuse_rrf
from composer.retrieval.rerank import Reranker

Latency = dict[str, npt.NDArray[np.float64]]
"""Seconds per question per stage ("rewrite", "expand", "retrieve", "rerank")."""

QuerySearch = Callable[[list[SearchedQuery], int], list[list[tuple[int, float]]]]
"""``search(queries, depth)``: a branch's hits for each searched query (its parts weighted), best first."""


@dataclass(frozen=True)
class Branches:
    """How to search one index's two branches for a batch of searched queries, and the memo slot of each:
    ``dense(queries, depth)`` and ``bm25(queries, depth)`` return each query's (table position, score)
    hits. ``hyde(pairs)`` gives the dense search for the HyDE vectors of (query, expansion) pairs (the
    query's vector mixed with its passages'), taking the memo keys ``_hyde_key`` makes."""

    table: ChunkTable
    dense_slot: tuple[str, ...] | None
    bm25_slot: tuple[str, ...]
    dense: QuerySearch | None
    bm25: QuerySearch
    hyde: Callable[[Sequence[tuple[SearchedQuery, Expansion]]], Search] | None = None


class Retriever:
    """Ranks questions for one pipeline's conversation, retrieval, rerank and expansion settings over one
    index. After ``rank``, ``searched`` holds each question's searched query and ``failed`` the questions
    whose conversation rewrite failed (searched by ``concat`` instead)."""

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
        conversation: ConversationStage | None = None,
    ) -> None:
        self.settings = settings
        self.branches = branches
        self.store = store
        self.reranker = reranker
        self.reranks = reranks
        self.expander = expander
        self.rrf_k_expansion = rrf_k_expansion
        self.floor = floor
        self.conversation = conversation
        self.searched: dict[str, SearchedQuery] = {}
        self.failed: dict[str, StageError] = {}

    @property
    def depth(self) -> int:
        """First-stage depth: k, or the prefetch a reranker chooses from."""
        r = self.settings
        return max(r.k, r.prefetch) if self.reranks else r.k

    def rank(self, questions: Sequence[Question]) -> tuple[Ranking, Latency]:
        """The questions' top k. Expansion and reranking read each searched query as a person would
        (``SearchedQuery.reading``: the history, then the follow-up, or the standalone rewrite): a follow-up
        alone cannot be paraphrased nor judged against a passage."""
        n = len(questions)
        latency: Latency = {}
        if self.conversation is not None:
            started = time.perf_counter()
            queries, self.failed = self.conversation.queries(questions)
            if self.conversation.config.rewrite == "llm":
                latency["rewrite"] = np.full(n, (time.perf_counter() - started) / max(n, 1))
        else:
            queries, self.failed = [SearchedQuery.plain(q.question) for q in questions], {}
        self.searched = {q.id: s for q, s in zip(questions, queries, strict=True)}
        texts = [q.reading for q in queries]
        if self.expander is not None:
            started = time.perf_counter()
            expansions = self.expander.expand_many(texts)
            latency["expand"] = np.full(n, (time.perf_counter() - started) / max(n, 1))
            items, scores, seconds = self._expanded(queries, expansions)
        else:
            items, scores, seconds = self._first_stage(queries, self.depth)
        latency["retrieve"] = seconds
        if self.reranks:
            started = time.perf_counter()
            items, scores = self._rerank(texts, items, scores)
            latency["rerank"] = np.full(n, (time.perf_counter() - started) / max(n, 1))
        k = self.settings.k
        ranking = Ranking(tuple(q.id for q in questions), items[:, :k], scores[:, :k], self.branches.table)
        return ranking, latency

    def _first_stage(
        self, texts: list[SearchedQuery], depth: int, hyde: tuple[list[str], Search] | None = None
    ) -> tuple[Items, Scores, npt.NDArray[np.float64]]:
        """Each query's top ``depth``, from the memoized branch lists; ``hyde`` (memo keys, search) replaces
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
        self, branch: str, queries: list[SearchedQuery], need: int,
        hyde: tuple[list[str], Search] | None = None,
    ) -> Lists:
        """A branch's lists, memoized by each query's key (a plain query's is its text)."""
        b = self.branches
        if hyde is not None:
            keys, search = hyde
            if b.dense_slot is None:
                raise ValueError("this index has no dense vectors")
            return self.store.lists((*b.dense_slot, "hyde"), keys, need, search, b.table, self.floor)
        by_key = {q.key: q for q in queries}
        keys = [q.key for q in queries]
        if branch == "bm25":
            slot, branch_search = b.bm25_slot, b.bm25
        elif b.dense is None or b.dense_slot is None:
            raise ValueError("this index has no dense vectors")
        else:
            slot, branch_search = b.dense_slot, b.dense

        def by_keys(missing: list[str], depth: int) -> list[list[tuple[int, float]]]:
            return branch_search([by_key[k] for k in missing], depth)

        return self.store.lists(slot, keys, need, by_keys, b.table, self.floor)

    def _expanded(
        self, queries: list[SearchedQuery], expansions: list[Expansion]
    ) -> tuple[Items, Scores, npt.NDArray[np.float64]]:
        """Multi-query: every query's list (the searched query first, as it is weighted), fused per
        question by RRF. HyDE: the dense branch searched with the searched query's vector mixed with its
        hypothetical passage's (BM25 keeps the searched query)."""
        depth = self.depth
        if self.expander is not None and self.expander.method == "hyde":
            hyde = self.branches.hyde
            if hyde is None:
                raise ValueError("HyDE needs dense vectors")
            keys = [_hyde_key(q, e) for q, e in zip(queries, expansions, strict=True)]
            pairs = list(zip(queries, expansions, strict=True))
            return self._first_stage(queries, depth, (keys, hyde(pairs)))
        width = max(len(e.queries) for e in expansions)
        flat = [
            query if j == 0 else SearchedQuery.plain(text)
            for query, e in zip(queries, expansions, strict=True)
            for j, text in enumerate(e.queries)
        ]
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


def _hyde_key(query: SearchedQuery, expansion: Expansion) -> str:
    """The memo key of a HyDE query: the searched query and the passages its vector was mixed with."""
    return "\x00".join((query.key, *expansion.passages))
