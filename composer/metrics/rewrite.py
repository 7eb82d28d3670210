"""How close the query a pipeline searched is to a question's gold standalone rewrite: the conversation
stage's rewriter scored on its own, apart from what retrieval then made of its query."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from composer.data.types import Question
from composer.metrics.answer import token_f1

REWRITE_SIMILARITY = "rewrite_similarity"


def rewrite_similarity(searched: str, standalone: str, lang: str | None = None) -> float:
    """Token F1 of the searched query against the gold rewrite, over the content tokens ``token_f1``
    compares (ar/fa/en folding, stopwords out): 1 when both say the same words, 0 when they share none."""
    return token_f1(searched, standalone, lang)


def rewrite_similarities(
    questions: Sequence[Question], searched: Mapping[str, str] | None = None
) -> np.ndarray | None:
    """``rewrite_similarity`` per question, NaN where a question has no ``standalone``; None when none has.
    ``searched``: question id -> the query searched for it; a question not in it was searched as asked
    (no conversation stage searches the question itself)."""
    if not any(q.standalone for q in questions):
        return None
    given = searched or {}
    return np.array(
        [rewrite_similarity(given.get(q.id, q.question), q.standalone) if q.standalone else np.nan
         for q in questions],
        dtype=np.float64,
    )
