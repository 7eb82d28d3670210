"""The offline answerer: the sentence of the passages that shares the most content words with the question.

It needs no model, so studies run anywhere; its answers are spans of the contexts, which makes them
comparable with extractive gold answers (ARCD, PersianQA) through token F1.
"""

from __future__ import annotations

from collections.abc import Sequence

from composer.text import content_tokens, detect_language, split_sentences


class ExtractiveAnswerer:
    """Picks the best-matching sentence among the passages it is given (the pipeline gives it the top
    ``generation.max_contexts``).

    Score = distinct question content tokens the sentence contains; ties go to the higher-ranked passage,
    then the earlier sentence. Without any overlap the first sentence of the top passage is the answer
    (the retriever ranked it first), and with no passage the answer is empty (scored as unanswered, not
    as wrong).
    """

    name = "extractive"

    def answer(self, question: str, contexts: Sequence[str]) -> str:
        lang = detect_language(question)
        wanted = set(content_tokens(question, lang))
        best, best_score = "", -1
        for passage in contexts:
            for sentence in split_sentences(passage):
                score = len(wanted.intersection(content_tokens(sentence, lang)))
                if score > best_score:
                    best, best_score = sentence, score
        return best
