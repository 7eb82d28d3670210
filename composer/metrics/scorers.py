"""The answer-scorer interface, implemented by the deterministic scorers here and the LLM judges
(``composer.judges``), and what both agree on: which answers are left unscored, which references count."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from composer.data.types import Question
from composer.metrics.answer import exact_match, is_refusal, shared_language, token_f1, unsupported

Reference = str | Sequence[str] | None


@dataclass(frozen=True)
class Score:
    """A score in [0, 1], or None when the answer was not scored; ``reason`` says why either way."""

    score: float | None
    reason: str


class AnswerScorer(Protocol):
    name: str

    def score(
        self, question: Question, answer: str | None, contexts: Sequence[str], reference: Reference
    ) -> Score:
        """Grade ``answer`` given the retrieved ``contexts`` and the gold ``reference`` answer(s)."""
        ...


ANSWER_QUALITY_METRICS: frozenset[str] = frozenset(
    {"token_f1", "exact_match", "answer_correctness", "llm_judge_rating", "answer_relevancy"}
)
"""Metrics of how well an answer answers its question: a refusal of an answerable question scores 0 on
them. Left out instead, refusing every hard question would raise their means (refusing would win)."""


def unscorable(answer: str | None, metric: str = "", golds: Sequence[str] = ()) -> Score | None:
    """The Score of an answer that is not graded, None for an answer to grade.

    An empty answer is unscored (the report counts it). A refusal is unscored too, a refusal being no
    hallucination, except on an answer-quality ``metric`` when the question is answerable (it has gold
    answers, ``golds``): then it failed to answer and scores 0. The report counts refusals either way.
    """
    if answer is None or not answer.strip():
        return Score(None, "empty answer")
    if is_refusal(answer):
        if metric in ANSWER_QUALITY_METRICS and golds:
            return Score(0.0, "refusal of an answerable question")
        return Score(None, "refusal")
    return None


def references(question: Question, reference: Reference) -> list[str]:
    """The given reference answers, else the question's gold answers."""
    if reference is None:
        return list(question.gold_answers)
    refs = [reference] if isinstance(reference, str) else list(reference)
    return [r for r in refs if r.strip()]


class _GoldScorer(ABC):
    """A scorer that compares the answer with the gold answers, all read in one shared language."""

    name: str

    def score(
        self, question: Question, answer: str | None, contexts: Sequence[str], reference: Reference
    ) -> Score:
        golds = references(question, reference)
        if (skip := unscorable(answer, self.name, golds)) is not None:
            return skip
        text = answer or ""  # not empty: unscorable said so
        if not golds:
            return Score(None, "no reference answer")
        return self._grade(text, golds, shared_language(text, *golds))

    @abstractmethod
    def _grade(self, answer: str, golds: list[str], lang: str) -> Score: ...


class TokenF1Scorer(_GoldScorer):
    """SQuAD-style token F1 against the best-matching gold answer."""

    name = "token_f1"

    def _grade(self, answer: str, golds: list[str], lang: str) -> Score:
        value, gold = max(((token_f1(answer, g, lang), g) for g in golds), key=lambda pair: pair[0])
        return Score(value, f"token F1 {value:.2f} against gold answer {gold!r}")


class ExactMatchScorer(_GoldScorer):
    """1 when the normalized answer equals a gold answer."""

    name = "exact_match"

    def _grade(self, answer: str, golds: list[str], lang: str) -> Score:
        matched = next((g for g in golds if exact_match(answer, g, lang)), None)
        if matched is None:
            return Score(0.0, f"matches none of {len(golds)} gold answer(s)")
        return Score(1.0, f"matches gold answer {matched!r}")


class OverlapFaithfulnessScorer:
    """Share of the answer's content words found in the retrieved contexts: a cheap hallucination signal."""

    name = "faithfulness_overlap"

    def score(
        self, question: Question, answer: str | None, contexts: Sequence[str], reference: Reference
    ) -> Score:
        if (skip := unscorable(answer)) is not None:
            return skip
        claimed, missing = unsupported(answer or "", contexts)
        if not claimed:
            return Score(None, "answer has no content words")
        found = len(claimed) - len(missing)
        reason = f"{found}/{len(claimed)} answer content words found in the contexts"
        if missing:
            reason += "; missing (stemmed): " + ", ".join(missing[:10])
        return Score(found / len(claimed), reason)


def default_scorers() -> list[AnswerScorer]:
    """The deterministic scorers, which need no model and cost nothing."""
    return [TokenF1Scorer(), ExactMatchScorer(), OverlapFaithfulnessScorer()]
