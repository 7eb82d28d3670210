"""Rankings as arrays: what retrieval hands to scoring without building a Hit per retrieved chunk.

A ``ChunkTable`` holds every item of one searched collection (an index's chunks, or the distinct ids of an
external run) addressed by position; a ``Ranking`` holds, per question, the positions and scores of the
items it retrieved, best first. A trial ranks 1,395 questions and scores them with a few array operations,
and ``Ranking.hits`` turns a row into ``Hit`` objects only where a person or an LLM reads it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

import numpy as np
import numpy.typing as npt

from composer.data.types import Hit, HitLists

logger = logging.getLogger(__name__)

NONE = -1
"""Padding in ``Ranking.items``: a row retrieved fewer items than the ranking is wide."""


@dataclass(frozen=True, eq=False)
class ChunkTable(Mapping[str, tuple[str, str]]):
    """Items of a collection by position; as a mapping, item id -> (document id, text) (the "universe"
    that answer matching searches). ``texts`` may be empty strings where the text is unknown; ``key``
    names a table that can be found again (an index key), empty for one made up on the spot."""

    ids: Sequence[str]
    doc_ids: Sequence[str]
    texts: Sequence[str]
    key: str = ""

    def __post_init__(self) -> None:
        if not len(self.ids) == len(self.doc_ids) == len(self.texts):
            raise ValueError("ids, doc_ids and texts must have one entry per item")

    def __getitem__(self, item_id: str) -> tuple[str, str]:
        i = self.position[item_id]
        return self.doc_ids[i], self.texts[i]

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)

    @cached_property
    def position(self) -> dict[str, int]:
        """Item id -> position (the first, if an id repeats)."""
        out: dict[str, int] = {}
        for i, item_id in enumerate(self.ids):
            out.setdefault(item_id, i)
        return out

    @cached_property
    def documents(self) -> tuple[str, ...]:
        """The distinct document ids, in first-seen order."""
        return tuple(dict.fromkeys(self.doc_ids))

    @cached_property
    def doc_index(self) -> npt.NDArray[np.int64]:
        """Per item, the position of its document in ``documents``."""
        where = {doc: i for i, doc in enumerate(self.documents)}
        return np.array([where[d] for d in self.doc_ids], dtype=np.int64)

    @cached_property
    def word_counts(self) -> npt.NDArray[np.int64]:
        """Per item, the whitespace tokens of its text (-1 where the text is unknown)."""
        return np.array([len(t.split()) if t else -1 for t in self.texts], dtype=np.int64)

    @cached_property
    def id_order(self) -> npt.NDArray[np.int64]:
        """Per item, the rank of its id in code-point order: trec_eval's tie-break, as an integer."""
        order = np.argsort(np.array(self.ids, dtype=object), kind="stable")
        ranks = np.empty(len(self.ids), dtype=np.int64)
        ranks[order] = np.arange(len(self.ids))
        return ranks


@dataclass(frozen=True, eq=False)
class Ranking:
    """Row i ranks ``question_ids[i]``: ``items`` are positions in ``table`` (``NONE`` pads a short row) and
    ``scores`` their scores, best first: trec_eval's order (score descending, equal scores by id
    descending) for every ranking Composer makes, the order ``ranking_from_hits`` was told for a run's."""

    question_ids: tuple[str, ...]
    items: npt.NDArray[np.int64]
    scores: npt.NDArray[np.float64]
    table: ChunkTable = field(repr=False)

    def __post_init__(self) -> None:
        if self.items.shape != self.scores.shape or self.items.ndim != 2:
            raise ValueError(
                f"items {self.items.shape} and scores {self.scores.shape} must be equal 2-d shapes"
            )
        if len(self.question_ids) != len(self.items):
            raise ValueError(f"{len(self.question_ids)} questions for {len(self.items)} rows")

    def __len__(self) -> int:
        return len(self.question_ids)

    @cached_property
    def lengths(self) -> npt.NDArray[np.int64]:
        """Items retrieved per question."""
        return (self.items != NONE).sum(axis=1)

    def hits(self, row: int) -> list[Hit]:
        """One question's ranked hits, with texts and document ids."""
        table = self.table
        return [
            Hit(table.ids[i], score, table.texts[i] or None, table.doc_ids[i])
            for i, score in zip(self.items[row].tolist(), self.scores[row].tolist(), strict=True)
            if i != NONE
        ]

    def to_hit_lists(self) -> HitLists:
        return {qid: self.hits(row) for row, qid in enumerate(self.question_ids)}

    def rows(self, start: int, stop: int) -> Ranking:
        """Questions ``start:stop`` (a batch)."""
        return Ranking(
            self.question_ids[start:stop], self.items[start:stop], self.scores[start:stop], self.table
        )

    def top(self, k: int) -> Ranking:
        """The first ``k`` items of every row."""
        return Ranking(self.question_ids, self.items[:, :k], self.scores[:, :k], self.table)


def trec_sorted(
    items: npt.NDArray[np.int64], scores: npt.NDArray[np.float64], table: ChunkTable
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Rows re-sorted the way trec_eval ranks them: score descending, equal scores by id descending; padding
    last. The one ordering every ranking is kept in, so that a ranking's top k is the same whatever depth it
    was fetched at, and equal to what trec_eval would score."""
    pad = items == NONE
    key_score = np.where(pad, -np.inf, scores)
    key_id = np.where(pad, -1, table.id_order[np.where(pad, 0, items)])
    order = np.lexsort((-key_id, -key_score), axis=1)
    return np.take_along_axis(items, order, axis=1), np.take_along_axis(scores, order, axis=1)


HitOrder = Literal["auto", "given", "score"]
"""How an external run's hits are ranked: ``score`` is trec_eval's order (score descending, equal scores by
id descending); ``given`` is the file's order; ``auto`` (the default) is the file's order for a question
whose hits all score alike (a rank-only system, or no scores), trec_eval's otherwise."""


def ranking_from_hits(
    by_question: HitLists, question_ids: Sequence[str], table: ChunkTable, *, order: HitOrder = "auto"
) -> Ranking:
    """Hit lists as a Ranking over ``table`` (which must hold every hit id), ranked by ``order``.

    Re-sorting a rank-only system's hits by id silently changes a user's numbers (seen: hit@1 0.9 -> 0.5),
    so ``auto`` keeps the given order where the scores say nothing; where trec_eval's order moves items of a
    scored question, a warning says how many questions changed and how to keep the file's order."""
    lists = [by_question.get(qid, []) for qid in question_ids]
    depth = max((len(hits) for hits in lists), default=0)
    items = np.full((len(lists), depth), NONE, dtype=np.int64)
    scores = np.zeros((len(lists), depth), dtype=np.float64)
    position = table.position
    for row, hits in enumerate(lists):
        items[row, : len(hits)] = [position[h.id] for h in hits]
        scores[row, : len(hits)] = [h.score for h in hits]
    if order == "given":
        return Ranking(tuple(question_ids), items, scores, table)
    sorted_items, sorted_scores = trec_sorted(items, scores, table)
    if order == "auto":
        pad = items == NONE
        low = np.where(pad, np.inf, scores).min(axis=1, initial=np.inf)
        high = np.where(pad, -np.inf, scores).max(axis=1, initial=-np.inf)
        alike = ~(low < high)
        sorted_items = np.where(alike[:, None], items, sorted_items)
        sorted_scores = np.where(alike[:, None], scores, sorted_scores)
        moved = int((sorted_items != items).any(axis=1).sum())
        if moved:
            logger.warning(
                "%d of %d questions re-sorted by score (equal scores by id, descending) as trec_eval ranks "
                "them: their order differs from the run's; to score the run in its own order, pass "
                "--order given (order='given')", moved, len(lists),
            )
    return Ranking(tuple(question_ids), sorted_items, sorted_scores, table)
