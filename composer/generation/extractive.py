"""The offline answerer: the sentence of the top chunks that shares the most content words with the question.

It needs no model, so studies run anywhere; its answers are spans of the contexts, which makes them
comparable with extractive gold answers (ARCD, PersianQA) through token F1.
"""

from __future__ import annotations

from collections.abc import Sequence

from composer.data.types import Hit, Question
from composer.text import content_tokens, detect_language, split_sentences


class ExtractiveAnswerer:
    """Picks the best-matching sentence among the first ``max_contexts`` hits.

    Score = distinct question content tokens the sentence contains; ties go to the higher-ranked hit, then
    the earlier sentence. Without any overlap the first sentence of the top hit is the answer (the retriever
    ranked it first), and with no hit text the answer is empty (scored as unanswered, not as wrong).
    """

    name = "extractive"

    def __init__(self, max_contexts: int = 3) -> None:
        if max_contexts < 1:
            raise ValueError("max_contexts must be >= 1")
        self.max_contexts = max_contexts

    def answer(self, question: Question, hits: Sequence[Hit]) -> str:
        lang = detect_language(question.question)
        wanted = set(content_tokens(question.question, lang))
        best, best_score = "", -1
        for hit in hits[: self.max_contexts]:
            for sentence in split_sentences(hit.text or ""):
                score = len(wanted.intersection(content_tokens(sentence, lang)))
                if score > best_score:
                    best, best_score = sentence, score
        return best
