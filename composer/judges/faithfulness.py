"""Faithfulness: the share of the answer's claims that the retrieved contexts support."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from composer.data.types import Question
from composer.judges.base import LLMJudge, Verdict
from composer.judges.prompts import FAITHFULNESS
from composer.llm.parse import parse_verdicts
from composer.llm.prompt import numbered, prompt_language
from composer.metrics.scorers import Score


class FaithfulnessJudge(LLMJudge):
    """Claims are extracted from the answer, then each is verified against the contexts in one call.

    score = supported / total; ``details["grounded"]`` is the binary verdict (every claim supported).
    """

    name = "faithfulness"

    async def _judge(
        self, question: Question, answer: str, contexts: Sequence[str], references: list[str]
    ) -> Verdict:
        passages = [" ".join(c.split()) for c in contexts if c.strip()]
        if not passages:
            return Verdict(
                Score(0.0, "no retrieved context to support the answer"), details={"grounded": False}
            )
        lang = prompt_language(question.question)
        claims = await self._statements(lang, question.question, answer)
        if not claims:
            return Verdict(Score(None, "the answer makes no claim to verify"))
        verdicts = await self._ask(
            FAITHFULNESS,
            lang,
            partial(parse_verdicts, expected=len(claims)),
            contexts=numbered(passages),
            statements=numbered(claims, brackets=False),
        )
        supported = sum(verdicts)
        reason = f"{supported}/{len(claims)} claims supported by the contexts"
        unsupported = [c for c, v in zip(claims, verdicts, strict=True) if not v]
        if unsupported:
            reason += "; unsupported: " + " | ".join(unsupported[:3])
        grounded = supported == len(claims)
        details = {"claims": claims, "verdicts": verdicts, "grounded": grounded}
        return Verdict(Score(supported / len(claims), reason), details=details)
