"""First-stage candidates: each branch (dense, BM25) of an index searched once per query and memoized.

A study's trials differ in k, fusion, weights and rerankers far more often than in what they search, so
a branch's list for a query is fetched once, deep enough for every trial (``floor``: the deepest the
search space can ask for), and every later trial slices it. Slicing must give what a search at the smaller
depth would: lists are kept in trec order (score descending, equal scores by id descending), and a list is
fetched deeper until no tie straddles the cut (its ``safe`` depth covers what is asked), so the top d of a
list is the same whatever depth it was fetched at. That is what lets ``composer eval --config`` reproduce a
trial's metrics to the last digit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from composer.data.ranking import NONE, ChunkTable, trec_sorted

Search = Callable[[list[str], int], list[list[tuple[int, float]]]]
"""``search(queries, depth)``: for each query its hits as (table position, score), best first."""

SELECTION_NOISE = 1e-5
"""Relative float32 error of the scores Qdrant ranks its candidates by (they are then rescored exactly)."""
DEPTH_SLACK = 1.25
"""Fetch this much deeper than asked, so a tie at the cut can be seen (and fetched past) at once."""


@dataclass(frozen=True)
class Row:
    """One query's list in trec order; ``safe``: the top ``safe`` items are exactly the top ``safe`` of
    the whole collection (every item tied with them is in the list); ``seconds``: what fetching it cost."""

    items: npt.NDArray[np.int64]
    scores: npt.NDArray[np.float64]
    safe: int
    seconds: float


@dataclass(frozen=True)
class Lists:
    """A batch of queries' lists cut at one depth: rows of positions (``NONE`` pads) and scores, and each
    query's fetch cost in seconds (what a trial's latency reports, memo hit or not)."""

    items: npt.NDArray[np.int64]
    scores: npt.NDArray[np.float64]
    seconds: npt.NDArray[np.float64]


class CandidateStore:
    """Memoized branch lists, per (index key, branch, query settings) and query text."""

    def __init__(self) -> None:
        self._rows: dict[Hashable, dict[str, Row]] = {}
        self.searches = 0
        """Backend searches issued (batches): a memo hit issues none."""
        self.search_seconds = 0.0
        """Wall time spent in those searches (and their exact rescoring)."""

    def lists(
        self,
        slot: Hashable,
        queries: Sequence[str],
        need: int,
        search: Search,
        table: ChunkTable,
        floor: int = 0,
    ) -> Lists:
        """Each query's top ``need`` for branch ``slot``, searching only what no earlier call fetched
        deep enough; new fetches go at least ``floor`` deep."""
        rows = self._rows.setdefault(slot, {})
        missing = list(dict.fromkeys(q for q in queries if q not in rows or rows[q].safe < need))
        depth = max(need, floor, 1)
        while missing:
            depth = max(int(depth * DEPTH_SLACK) + 5, depth + 1)
            started = time.perf_counter()
            found = search(missing, depth)
            elapsed = time.perf_counter() - started
            self.searches += 1
            self.search_seconds += elapsed
            seconds = elapsed / len(missing)
            for query, hits in zip(missing, found, strict=True):
                rows[query] = _row(
                    hits, depth, table, seconds + (rows[query].seconds if query in rows else 0.0)
                )
            missing = [q for q in missing if rows[q].safe < need and depth < len(table)]
        return _cut([rows[q] for q in queries], need)

    def clear(self) -> None:
        self._rows.clear()


def _row(hits: list[tuple[int, float]], depth: int, table: ChunkTable, seconds: float) -> Row:
    items = np.array([i for i, _ in hits], dtype=np.int64).reshape(1, -1)
    scores = np.array([s for _, s in hits], dtype=np.float64).reshape(1, -1)
    items, scores = trec_sorted(items, scores, table)
    if len(hits) < depth or len(hits) >= len(table):  # nothing more to give: the list is exact
        safe = len(table)
    else:  # exact down to the last score clearly above the deepest one fetched (Qdrant picks the
        # candidates by float32 scores: one it left out may score up to float32 noise above the last)
        last = scores[0, -1]
        safe = int((scores[0] > last + SELECTION_NOISE * max(abs(last), 1.0)).sum())
    return Row(items[0], scores[0], safe, seconds)


def _cut(rows: Sequence[Row], need: int) -> Lists:
    items = np.full((len(rows), need), NONE, dtype=np.int64)
    scores = np.zeros((len(rows), need), dtype=np.float64)
    for i, row in enumerate(rows):
        n = min(need, len(row.items))
        items[i, :n] = row.items[:n]
        scores[i, :n] = row.scores[:n]
    return Lists(items, scores, np.array([row.seconds for row in rows], dtype=np.float64))
