"""Context precision and recall: were the retrieved passages useful, and do they hold the reference?"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from composer.data.types import Question
from composer.judges.base import LLMJudge, Verdict
from composer.judges.prompts import CONTEXT_PRECISION, CONTEXT_RECALL
from composer.llm.parse import parse_verdicts
from composer.llm.prompt import numbered, prompt_language
from composer.metrics.scorers import Score, unscorable
from composer.text import split_sentences


def average_precision(useful: Sequence[int]) -> float:
    """Mean of precision@k over the ranks k of the useful passages (0 when none is useful)."""
    hits, total = 0, 0.0
    for k, flag in enumerate(useful, 1):
        if flag:
            hits += 1
            total += hits / k
    return total / hits if hits else 0.0


class ContextPrecisionJudge(LLMJudge):
    """One call marks each passage useful or not for reaching the reference answer (the generated answer
    stands in when there is no reference); the score is their average precision in rank order."""

    name = "context_precision"
    needs_answer = False  # judges the passages, by the answer only when there is no reference

    async def _judge(
        self, question: Question, answer: str, contexts: Sequence[str], references: list[str]
    ) -> Verdict:
        passages = [" ".join(c.split()) for c in contexts if c.strip()]
        if not passages:
            return Verdict(Score(None, "no retrieved context"))
        target = references[0] if references else (answer if unscorable(answer) is None else None)
        if target is None:
            return Verdict(Score(None, "neither a reference nor a gradable answer to judge the passages by"))
        lang = prompt_language(question.question)
        useful = await self._ask(
            CONTEXT_PRECISION,
            lang,
            partial(parse_verdicts, expected=len(passages)),
            question=question.question,
            reference=target,
            contexts=numbered(passages),
        )
        value = average_precision(useful)
        basis = "reference" if references else "answer (no reference)"
        reason = f"average precision {value:.2f}: {sum(useful)}/{len(useful)} passages useful for the {basis}"
        return Verdict(Score(value, reason), details={"useful": useful})


class ContextRecallJudge(LLMJudge):
    """The reference answer's sentences (split keeping ؟ and unpunctuated endings) each marked as
    attributable to the contexts or not; the score is the attributable share."""

    name = "context_recall"
    needs_answer = False
    needs_reference = True

    async def _judge(
        self, question: Question, answer: str, contexts: Sequence[str], references: list[str]
    ) -> Verdict:
        sentences = [" ".join(s.split()) for s in split_sentences(references[0])]
        if not sentences:
            return Verdict(Score(None, "the reference answer is empty"))
        passages = [" ".join(c.split()) for c in contexts if c.strip()]
        if not passages:
            return Verdict(Score(0.0, "no retrieved context"), details={"attributed": [0] * len(sentences)})
        lang = prompt_language(question.question)
        attributed = await self._ask(
            CONTEXT_RECALL,
            lang,
            partial(parse_verdicts, expected=len(sentences)),
            question=question.question,
            contexts=numbered(passages),
            sentences=numbered(sentences, brackets=False),
        )
        value = sum(attributed) / len(attributed)
        reason = f"{sum(attributed)}/{len(attributed)} reference sentences found in the contexts"
        return Verdict(Score(value, reason), details={"attributed": attributed})
