"""Refusal metrics: how often the system declines, and whether it declines exactly when it should."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from composer.data.types import Question
from composer.metrics.refusal import is_refusal


def answer_refusal_rate(answers: Iterable[str | None]) -> float | None:
    """Share of the given answers that are refusals (None for no answers; a failed answer is skipped)."""
    flags = [is_refusal(a) for a in answers if a is not None]
    return sum(flags) / len(flags) if flags else None


def refusal_accuracy(questions: Iterable[Question], answers: Mapping[str, str | None]) -> float | None:
    """Over the unanswerable questions (no gold answer, e.g. PersianQA's): share answered with a refusal.

    None when no unanswerable question was answered.
    """
    flags = [
        is_refusal(answer)
        for q in questions
        if not q.gold_answers and (answer := answers.get(q.id)) is not None
    ]
    return sum(flags) / len(flags) if flags else None
