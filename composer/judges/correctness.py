"""Answer correctness: statement-level F1 against the reference, blended with embedding similarity."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from functools import partial

from pydantic import BaseModel, ConfigDict, Field, model_validator

from composer.data.types import Question
from composer.judges.base import EmbedFn, LLMJudge, Similarity, Verdict
from composer.judges.prompts import CORRECTNESS
from composer.llm.client import LLMClient
from composer.llm.parse import parse_classification
from composer.llm.prompt import PromptLanguage, numbered, prompt_language
from composer.metrics.scorers import AnswerScorer, Score


class CorrectnessWeights(BaseModel):
    """Weights of statement F1 and embedding similarity (Ragas' 0.75 / 0.25 by default), normalized."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    statements: float = Field(default=0.75, ge=0)
    similarity: float = Field(default=0.25, ge=0)

    @model_validator(mode="after")
    def _positive(self) -> CorrectnessWeights:
        if self.statements + self.similarity <= 0:
            raise ValueError("at least one answer_correctness weight must be positive")
        return self


def statement_f1(true_positives: int, false_positives: int, false_negatives: int) -> float:
    """F1 over statements: TP / (TP + (FP + FN) / 2); 0 when nothing is right."""
    if true_positives == 0:
        return 0.0
    return true_positives / (true_positives + 0.5 * (false_positives + false_negatives))


class AnswerCorrectnessJudge(LLMJudge):
    """Statements from the answer and from the reference; the judge marks answer statements the reference
    supports (TP, else FP) and reference statements the answer covers (else FN).

    Without an embedding function the similarity term is dropped and the reason says so.
    """

    name = "answer_correctness"
    needs_reference = True

    def __init__(
        self,
        client: LLMClient,
        *,
        embed: EmbedFn | None = None,
        weights: CorrectnessWeights | None = None,
        fallback: AnswerScorer | None = None,
        blend: float = 0.0,
    ) -> None:
        super().__init__(client, fallback=fallback, blend=blend)
        self.weights = weights or CorrectnessWeights()
        self.similarity = Similarity(embed) if embed is not None else None

    async def _judge(
        self, question: Question, answer: str, contexts: Sequence[str], references: list[str]
    ) -> Verdict:
        reference = references[0]
        lang = prompt_language(question.question)
        answer_statements, reference_statements = await asyncio.gather(
            self._statements(lang, question.question, answer),
            self._statements(lang, question.question, reference),
        )
        if not reference_statements:
            return Verdict(Score(None, "the reference answer has no statement"))
        supported, covered = await self._classify(
            lang, question.question, answer_statements, reference_statements
        )
        tp, fp, fn = sum(supported), len(supported) - sum(supported), len(covered) - sum(covered)
        f1 = statement_f1(tp, fp, fn)
        details: dict[str, object] = {"tp": tp, "fp": fp, "fn": fn, "statement_f1": f1}
        w_f1, w_sim = self.weights.statements, self.weights.similarity
        if self.similarity is None or w_sim == 0:
            note = "" if w_sim == 0 else " (no embedding function: similarity term dropped)"
            return Verdict(
                Score(f1, f"statement F1 {f1:.2f} (TP {tp}, FP {fp}, FN {fn}){note}"), details=details
            )
        (similarity,) = await self.similarity.to_first([reference, answer])
        value = (w_f1 * f1 + w_sim * similarity) / (w_f1 + w_sim)
        details["similarity"] = similarity
        reason = (
            f"{value:.2f} = statement F1 {f1:.2f} (TP {tp}, FP {fp}, FN {fn}) x {w_f1:g} + similarity "
            f"{similarity:.2f} x {w_sim:g}"
        )
        return Verdict(Score(value, reason), details=details)

    async def _classify(
        self,
        lang: PromptLanguage,
        question: str,
        answer_statements: list[str],
        reference_statements: list[str],
    ) -> tuple[list[int], list[int]]:
        if not answer_statements:
            return [], [0] * len(reference_statements)
        return await self._ask(
            CORRECTNESS,
            lang,
            partial(
                parse_classification,
                answer_count=len(answer_statements),
                reference_count=len(reference_statements),
            ),
            question=question,
            answer_statements=numbered(answer_statements, brackets=False),
            reference_statements=numbered(reference_statements, brackets=False),
        )
