"""The 1-5 rubric rating (fully correct ... completely incorrect), normalized to [0, 1] for the objective."""

from __future__ import annotations

from collections.abc import Sequence

from composer.data.types import Question
from composer.judges.base import LLMJudge, Verdict
from composer.judges.prompts import RATING
from composer.llm.parse import parse_rating
from composer.llm.prompt import prompt_language
from composer.metrics.scorers import Score


def normalize_rating(rating: float) -> float:
    """A 1-5 rating on [0, 1]: (r - 1) / 4."""
    return (rating - 1.0) / 4.0


def rating_out_of_5(normalized: float) -> float:
    """Back from [0, 1] to the 1-5 scale the report shows ("4.2/5")."""
    return 1.0 + 4.0 * normalized


class RatingJudge(LLMJudge):
    """One call per answer; ``details["rating"]`` keeps the raw 1-5 value."""

    name = "llm_judge_rating"
    needs_reference = True

    async def _judge(
        self, question: Question, answer: str, contexts: Sequence[str], references: list[str]
    ) -> Verdict:
        lang = prompt_language(question.question)
        reference = references[0] if len(references) == 1 else " / ".join(references)
        rating, why = await self._ask(
            RATING, lang, parse_rating, question=question.question, reference=reference, answer=answer
        )
        reason = f"rated {rating:.1f}/5" + (f": {why}" if why else "")
        return Verdict(Score(normalize_rating(rating), reason), details={"rating": rating})
