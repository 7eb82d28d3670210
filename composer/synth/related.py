"""Pairs of related passages for multi-hop questions.

Two passages are related when they share rare content words: normalized, stopword-free tokens of at
least three letters, not numbers, found in at least two and at most ``max(3, 2%)`` of the passages. A pair
scores the sum of the shared words' IDF, plus one IDF-sized bonus when both documents carry the same
title. Near-copies (token Jaccard above 0.5: ARCD repeats a paragraph with one more sentence) are no pair,
since a question over them needs only one. Partners come from another document in the same language, so
answering needs two documents retrieved. Each passage is paired with its best partner.
"""

from __future__ import annotations

import math
from collections import defaultdict

from composer.synth.passages import Passage
from composer.text import content_tokens

NEAR_COPY_JACCARD = 0.5


def related_pairs(passages: list[Passage]) -> list[tuple[Passage, Passage]]:
    """Distinct unordered pairs, in the order of their first passage; none when nothing is related."""
    tokens = [
        frozenset(t for t in content_tokens(p.text, p.lang) if len(t) >= 3 and not t.isdigit())
        for p in passages
    ]
    df: dict[str, int] = defaultdict(int)
    for toks in tokens:
        for t in toks:
            df[t] += 1
    max_df = max(3, math.ceil(0.02 * len(passages)))
    postings: dict[str, list[int]] = defaultdict(list)
    for i, toks in enumerate(tokens):
        for t in toks:
            if 2 <= df[t] <= max_df:
                postings[t].append(i)
    idf = {t: math.log(len(passages) / df[t]) for t in postings}
    bonus = math.log(max(len(passages), 2))
    pairs: dict[tuple[str, str], tuple[Passage, Passage]] = {}
    for i, p in enumerate(passages):
        scores: dict[int, float] = defaultdict(float)
        for t in tokens[i]:
            for j in postings.get(t, ()):
                if j != i:
                    scores[j] += idf[t]
        best: tuple[float, int] | None = None
        for j, score in scores.items():
            q = passages[j]
            if q.doc_id == p.doc_id or q.lang != p.lang:
                continue  # a multi-hop question spans two documents, in one language
            union = len(tokens[i] | tokens[j])
            if union and len(tokens[i] & tokens[j]) / union > NEAR_COPY_JACCARD:
                continue
            if p.title and p.title == q.title:
                score += bonus
            if best is None or (score, -j) > (best[0], -best[1]):
                best = (score, j)
        if best is not None:
            q = passages[best[1]]
            key = (min(p.key, q.key), max(p.key, q.key))
            pairs.setdefault(key, (p, q))
    return list(pairs.values())
