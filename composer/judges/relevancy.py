"""Answer relevancy: how well questions written back from the answer match the asked question."""

from __future__ import annotations

from collections.abc import Sequence

from composer.data.types import Question
from composer.judges.base import EmbedFn, LLMJudge, Similarity, Verdict
from composer.judges.prompts import RELEVANCY
from composer.llm.client import LLMClient
from composer.llm.parse import parse_questions
from composer.llm.prompt import prompt_language
from composer.metrics.scorers import AnswerScorer, Score


class AnswerRelevancyJudge(LLMJudge):
    """Ragas' method: the judge writes ``n`` questions the answer responds to; the score is their mean
    embedding similarity to the real question, 0 for a noncommittal answer. Needs an embedding function."""

    name = "answer_relevancy"

    def __init__(
        self,
        client: LLMClient,
        *,
        embed: EmbedFn,
        n: int = 3,
        fallback: AnswerScorer | None = None,
        blend: float = 0.0,
    ) -> None:
        super().__init__(client, fallback=fallback, blend=blend)
        self.similarity = Similarity(embed)
        self.n = n

    async def _judge(
        self, question: Question, answer: str, contexts: Sequence[str], references: list[str]
    ) -> Verdict:
        lang = prompt_language(question.question)
        generated, noncommittal = await self._ask(
            RELEVANCY, lang, parse_questions, answer=answer, n=str(self.n)
        )
        details = {"questions": generated, "noncommittal": noncommittal}
        if noncommittal:
            return Verdict(Score(0.0, "the judge found the answer noncommittal"), details=details)
        similarities = await self.similarity.to_first([question.question, *generated])
        value = sum(similarities) / len(similarities)
        reason = f"mean similarity {value:.2f} of {len(generated)} questions written back from the answer"
        return Verdict(Score(value, reason), details=details)
