"""Matching rankings: which keys are ranked, in which order, and which of them are relevant.

The retrieval metrics then only compare a relevance matrix with the number of relevant items per question
(``Matched``), so every match mode shares the same, parity-tested metric code. Document and chunk modes
match ids, vectorized over a whole ``Ranking``; answer and context modes read texts, one question at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import numpy.typing as npt

from composer.data.ranking import NONE, Ranking
from composer.data.types import Corpus, Hit, Question
from composer.metrics.retrieval import Counts, Relevance, relevance
from composer.metrics.textmatch import contains_answer, matches_context

MatchMode = Literal["document", "chunk", "answer", "context"]
TextMatchMode = Literal["answer", "context"]
MATCH_MODES: tuple[str, ...] = get_args(MatchMode)

Universe = Mapping[str, tuple[str, str]]
"""Every item of the searched collection: item id -> (document id, text). Treated as immutable."""

_Collection = Corpus | Universe


@dataclass(frozen=True)
class MatchedRanking:
    """One question's distinct keys in rank order with their scores, and the keys that count as relevant."""

    ranked: list[str]
    scores: list[float]
    relevant: frozenset[str]


@dataclass(frozen=True)
class Matched:
    """A batch of matched rankings: what the retrieval metrics take, and which questions have labels (the
    others are skipped and counted, never averaged in as 0)."""

    relevant: Relevance
    n_relevant: Counts
    labelled: npt.NDArray[np.bool_]


def chunk_parent(item_id: str) -> str:
    """The document id of a Composer chunk id ``f"{doc_id}#{index}"``; any other id is returned unchanged."""
    head, sep, tail = item_id.rpartition("#")
    return head if sep and head and tail.isdigit() else item_id


def match_hits(
    question: Question,
    hits: Sequence[Hit],
    mode: TextMatchMode,
    *,
    corpus: Corpus | None = None,
    universe: Universe | None = None,
) -> MatchedRanking | None:
    """Match ``hits`` (taken in the given order: trec order, see ``composer.data.ranking``) for ``question``
    by their texts.

    Returns None when the question has no labels for this mode, so callers skip and count it. ``universe``
    (every chunk of the collection) lets answer mode know how many relevant items exist; without it, answer
    mode counts the corpus documents (when the hits are document ids) plus the retrieved items.
    """
    if mode not in _MATCHERS:
        raise ValueError(f"unknown text match mode {mode!r}; expected one of {sorted(_MATCHERS)}")
    return _MATCHERS[mode](question, hits, corpus, universe)


def match_ranking(
    questions: Sequence[Question],
    ranking: Ranking,
    mode: MatchMode,
    *,
    corpus: Corpus | None = None,
    universe: Universe | None = None,
) -> Matched:
    """Match every row of ``ranking`` (row i answers ``questions[i]``) under ``mode``.

    Document and chunk modes compare ids, as arrays: chunks of one document count once, at their best
    rank. Answer and context modes read texts, one question at a time (see ``match_hits``).
    """
    if mode == "document":
        return _by_keys(
            questions, ranking.table.doc_index[np.maximum(ranking.items, 0)], ranking, ranking.table.documents
        )
    if mode == "chunk":
        return _by_keys(questions, ranking.items, ranking, ranking.table.ids)
    if mode not in _MATCHERS:
        raise ValueError(f"unknown match mode {mode!r}; expected one of {sorted(MATCH_MODES)}")
    verdicts = [
        match_hits(q, ranking.hits(row), mode, corpus=corpus, universe=universe)
        for row, q in enumerate(questions)
    ]
    matrix, counts = relevance(
        [v.ranked if v else [] for v in verdicts], [v.relevant if v else () for v in verdicts]
    )
    labelled = np.array([v is not None for v in verdicts], dtype=bool)
    return Matched(matrix, counts, labelled)


def _by_keys(
    questions: Sequence[Question], keys: npt.NDArray[np.int64], ranking: Ranking, names: Sequence[str]
) -> Matched:
    """Relevance of rows of integer keys (document or chunk positions): repeats after a key's first
    (best) rank are dropped, then each key is looked up in its question's labels."""
    keys = np.where(ranking.items == NONE, NONE, keys)
    repeat = np.zeros(keys.shape, dtype=bool)
    for j in range(1, keys.shape[1]):
        repeat[:, j] = (keys[:, :j] == keys[:, j : j + 1]).any(axis=1)
    keep = (keys != NONE) & ~repeat
    order = np.argsort(~keep, axis=1, kind="stable")  # kept keys first, in rank order
    keys, keep = np.take_along_axis(keys, order, axis=1), np.take_along_axis(keep, order, axis=1)
    position = {name: i for i, name in enumerate(names)}
    width = len(names) + 1
    codes = [
        row * width + position[label]
        for row, q in enumerate(questions)
        for label in set(q.relevant_ids)
        if label in position
    ]
    matrix = keep & np.isin(np.arange(len(keys))[:, None] * width + keys, np.array(codes, dtype=np.int64))
    counts = np.array([len(set(q.relevant_ids)) for q in questions], dtype=np.int64)
    return Matched(matrix, counts, counts > 0)


def default_match_mode(questions: Iterable[Question], corpus: Corpus | None = None) -> MatchMode:
    """The mode the labels call for: ids of documents or of chunks, else gold contexts, else gold answers."""
    items = list(questions)
    labels = [label for q in items for label in q.relevant_ids]
    if labels:
        chunk_like = sum(1 for x in labels if chunk_parent(x) != x and (corpus is None or x not in corpus))
        return "chunk" if 2 * chunk_like > len(labels) else "document"
    if any(q.context for q in items):
        return "context"
    if any(q.gold_answers for q in items):
        return "answer"
    return "document"


def document_of(hit: Hit, corpus: Corpus | None, universe: Universe | None) -> str:
    """The hit's document: its own doc_id, else the universe's, else the hit itself when it is a corpus
    document, else the id a Composer chunk id names (``<doc id>#<n>``)."""
    if hit.doc_id:
        return hit.doc_id
    if universe is not None and hit.id in universe:
        return universe[hit.id][0]
    if corpus is not None and hit.id in corpus:
        return hit.id
    return chunk_parent(hit.id)


def _text_of(hit: Hit, corpus: Corpus | None, universe: Universe | None) -> str | None:
    """The hit's own text, else the universe's, else its document's (all a bare document id can offer)."""
    if hit.text is not None:
        return hit.text
    if universe is not None and hit.id in universe:
        return universe[hit.id][1]
    if corpus is not None:
        doc = corpus.get(hit.id) or corpus.get(document_of(hit, corpus, universe))
        return doc.text if doc is not None else None
    return None


def _distinct(keyed: Iterable[tuple[str, float]]) -> tuple[list[str], list[float]]:
    """Keys at their first (best) rank, with that rank's score."""
    best: dict[str, float] = {}
    for key, score in keyed:
        best.setdefault(key, score)
    return list(best), list(best.values())


def _chunks(
    question: Question, hits: Sequence[Hit], corpus: Corpus | None, universe: Universe | None
) -> MatchedRanking | None:
    if not question.relevant_ids:
        return None
    ranked, scores = _distinct((h.id, h.score) for h in hits)
    return MatchedRanking(ranked, scores, frozenset(question.relevant_ids))


def _answers(
    question: Question, hits: Sequence[Hit], corpus: Corpus | None, universe: Universe | None
) -> MatchedRanking | None:
    golds = question.gold_answers
    if not golds:
        return None
    labelled = frozenset(question.relevant_ids)
    unique = {h.id: h for h in reversed(hits)}  # first occurrence wins
    found = {
        h.id
        for h in unique.values()
        if (not labelled or h.id in labelled or document_of(h, corpus, universe) in labelled)
        and (text := _text_of(h, corpus, universe)) is not None
        and any(contains_answer(text, g) for g in golds)
    }
    collection: _Collection | None = universe
    if collection is None and corpus is not None and all(h.id in corpus for h in hits):
        collection = corpus
    if collection is not None:
        found |= _index(collection).answer_bearing(labelled, golds)
    ranked, scores = _distinct((h.id, h.score) for h in hits)
    return MatchedRanking(ranked, scores, frozenset(found))


def _contexts(
    question: Question, hits: Sequence[Hit], corpus: Corpus | None, universe: Universe | None
) -> MatchedRanking | None:
    """Each gold context is one target ``ctx:j``; a passage takes the key of the first context it matches.

    An id match without a text match stands for the first gold context not yet found higher up, so a
    question labelled with both ids and contexts still has exactly one target per context.
    """
    contexts = [c for c in question.context if c.strip()]
    if not contexts:
        return _chunks(question, hits, corpus, universe)
    labelled = frozenset(question.relevant_ids)
    keyed: list[tuple[str, float]] = []
    for hit in hits:
        text = _text_of(hit, corpus, universe)
        target = next((j for j, c in enumerate(contexts) if text and matches_context(text, c)), None)
        if target is None and hit.id in labelled:
            seen = {key for key, _ in keyed}
            target = next((j for j in range(len(contexts)) if f"ctx:{j}" not in seen), 0)
        keyed.append((hit.id if target is None else f"ctx:{target}", hit.score))
    ranked, scores = _distinct(keyed)
    return MatchedRanking(ranked, scores, frozenset(f"ctx:{j}" for j in range(len(contexts))))


_Matcher = Callable[[Question, Sequence[Hit], Corpus | None, Universe | None], MatchedRanking | None]
_MATCHERS: dict[str, _Matcher] = {"answer": _answers, "context": _contexts}


class _CollectionIndex:
    """A collection's items grouped by document, with memoized answer lookups (a study asks every trial)."""

    def __init__(self, items: Iterable[tuple[str, str, str]]) -> None:
        self.text: dict[str, str] = {}
        self.by_doc: dict[str, list[str]] = {}
        for item_id, doc_id, text in items:
            self.text[item_id] = text
            self.by_doc.setdefault(doc_id, []).append(item_id)
        self._memo: dict[tuple[frozenset[str], tuple[str, ...]], frozenset[str]] = {}

    def answer_bearing(self, labelled: frozenset[str], golds: tuple[str, ...]) -> frozenset[str]:
        """Items of the labelled documents, or labelled items (all items if unlabelled), holding an answer."""
        key = (labelled, golds)
        if key not in self._memo:
            if labelled:
                candidates = {i for label in labelled for i in self.by_doc.get(label, ())}
                candidates |= labelled & self.text.keys()
            else:
                candidates = set(self.text)
            self._memo[key] = frozenset(
                i for i in candidates if any(contains_answer(self.text[i], g) for g in golds)
            )
        return self._memo[key]


_INDEXES: list[tuple[_Collection, _CollectionIndex]] = []
_MAX_INDEXES = 4


def _index(collection: _Collection) -> _CollectionIndex:
    """The index of a corpus or universe, cached by identity for the few collections in use at a time."""
    for source, index in _INDEXES:
        if source is collection:
            return index
    if isinstance(collection, Corpus):
        index = _CollectionIndex((d.id, d.id, d.text) for d in collection)
    else:
        index = _CollectionIndex((i, doc, text) for i, (doc, text) in collection.items())
    _INDEXES.insert(0, (collection, index))
    del _INDEXES[_MAX_INDEXES:]
    return index
