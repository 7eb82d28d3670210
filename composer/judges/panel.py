"""Judge answers: every configured LLM judge grades each answer against the passages it was given.

The judges only judge: answers come from ``Pipeline.answer``, each carrying its contexts. A failed sample
(a judge gave up after its retries, with no fallback to score it) never fails a run by itself:
``FailureBudget`` counts failed samples by stage (retrieval, generation, the judges), and fails the run
once they exceed ``max_failure_share``. A sample the deterministic fallback scored is no failure: it is
counted apart, as a judge fallback (``judge_fallback``, a share of the samples).
"""

from __future__ import annotations

import asyncio
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from composer.data.types import Question
from composer.errors import ComposerError, ConfigError
from composer.generation.generator import Answer
from composer.judges.base import EmbedFn, LLMJudge, Verdict
from composer.judges.context import ContextPrecisionJudge, ContextRecallJudge
from composer.judges.correctness import AnswerCorrectnessJudge, CorrectnessWeights
from composer.judges.faithfulness import FaithfulnessJudge
from composer.judges.guidance import PROMPT_VARIANTS, JudgeExample, PromptVariant
from composer.judges.own_prompts import JudgePrompt, verdict_template
from composer.judges.rating import RatingJudge
from composer.judges.relevancy import AnswerRelevancyJudge
from composer.llm.client import LLMClient
from composer.llm.prompt import Localized, prompt_language
from composer.llm.sync import gather_until_failed, run_sync
from composer.llm.usage import Usage
from composer.metrics.scorers import OverlapFaithfulnessScorer, TokenF1Scorer

JUDGE_METRICS: tuple[str, ...] = (
    "answer_correctness",
    "faithfulness",
    "llm_judge_rating",
    "answer_relevancy",
    "context_precision",
    "context_recall",
)
"""Metrics an LLM judge computes; ``grounded`` comes with faithfulness."""

REFUSAL_METRICS: tuple[str, ...] = ("answer_refusal_rate", "refusal_accuracy")
"""Free with any generated answer: counted, not judged."""

GENERATION_METRICS: tuple[str, ...] = (*JUDGE_METRICS, "grounded", *REFUSAL_METRICS)
"""Every metric that needs an LLM, to generate the answers or to judge them."""

DEFAULT_JUDGE_METRICS: tuple[str, ...] = ("answer_correctness", "faithfulness")


class JudgeSettings(BaseModel):
    """How the judges grade: which metrics, how they are weighted, how many failures pass (the part of an
    experiment's ``judge:`` block, ``JudgeConfig``, that ``judge_answers`` takes)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metrics: tuple[str, ...] = DEFAULT_JUDGE_METRICS
    correctness_weights: CorrectnessWeights = Field(default_factory=CorrectnessWeights)
    blend: float = Field(default=0.0, ge=0.0, le=1.0, description="weight of the deterministic scorer")
    fallback: bool = Field(default=True, description="use the deterministic scorer when the judge fails")
    max_failure_share: float = Field(default=0.1, ge=0.0, le=1.0)
    relevancy_questions: int = Field(default=3, ge=1)
    prompt: JudgePrompt = Field(
        default="default",
        description="how strict the judge is told to be (default, strict, lenient), or a team's own "
        "verdict prompt per metric ({faithfulness: {system, user} | FILE | prompts:/NAME@ALIAS, ..., "
        "variant: strict})",
    )
    examples: tuple[JudgeExample, ...] = Field(
        default=(), description="few-shot human verdicts, shown for questions in their language"
    )

    @field_validator("metrics")
    @classmethod
    def _known(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [m for m in value if m not in JUDGE_METRICS]
        if unknown:
            raise ValueError(f"unknown judge metric(s) {unknown}; expected some of {list(JUDGE_METRICS)}")
        return tuple(dict.fromkeys(value))

    @field_validator("prompt", mode="before")
    @classmethod
    def _variant(cls, value: Any) -> Any:
        """A name is one of the variants: said of ``judge.prompt`` itself, not of a branch of its type."""
        if isinstance(value, str) and value not in PROMPT_VARIANTS:
            raise ValueError(f"unknown prompt variant {value!r}; expected one of {list(PROMPT_VARIANTS)}, or "
                             "a mapping of judged metrics to their own prompts")
        return value

    @field_validator("examples")
    @classmethod
    def _judged(cls, value: tuple[JudgeExample, ...]) -> tuple[JudgeExample, ...]:
        unknown = sorted({e.metric for e in value} - set(JUDGE_METRICS))
        if unknown:
            raise ValueError(f"examples of unknown judge metric(s) {unknown}")
        return value

    @property
    def variant(self) -> PromptVariant:
        """The variant that guides the built-in verdict templates."""
        return self.prompt if isinstance(self.prompt, str) else self.prompt.variant

    def own_templates(self) -> dict[str, Localized]:
        """The metrics judged with a team's own verdict prompt, and its templates per prompt language."""
        if isinstance(self.prompt, str):
            return {}
        return {metric: verdict_template(metric, ref, field=f"judge.prompt.{metric}")
                for metric, ref in self.prompt.own().items()}


@dataclass
class SampleResult:
    """One question's judged metrics (None = not scored), the judges' reasons, failures, the judges whose
    deterministic fallback scored it (``fallbacks``: scored, not failed) and details."""

    question_id: str
    lang: str
    metrics: dict[str, float | None] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)
    details: dict[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    @property
    def fell_back(self) -> bool:
        """Scored, but by a fallback where a judge failed: counted as ``judge_fallback``, not as failed."""
        return bool(self.fallbacks) and not self.failures


JUDGE_FALLBACK = "judge_fallback"
"""Trial metric: the share of samples a judge's deterministic fallback scored (the judge failed on them)."""
JUDGE_FALLBACK_SHARE = "judge_fallback_share"
"""Its key in error_rates.json, next to ``judge_fallback_samples``."""

Stage = Literal["retrieval", "generation", "judge"]
STAGE_FAILURES: dict[Stage, str] = {
    "retrieval": "retrieval failed on {n} of {total} questions",
    "generation": "{n} of {total} answers failed to generate",
    "judge": "the judge failed on {n} of {total} samples",
}
"""What a failed sample of each stage is called in the budget's message, so that the user knows where
to look (the generator's endpoint, or the judge's)."""


class FailureBudgetExceeded(ComposerError):
    """More samples failed than the run allows: a study marks the trial failed with this message, which
    says at which stage they failed (``by_stage``)."""

    def __init__(
        self, failed: int, total: int, budget: float, usage: Usage,
        by_stage: Mapping[Stage, int] | None = None,
    ) -> None:
        self.failed = failed
        self.total = total
        self.budget = budget
        self.by_stage = dict(by_stage or {})
        kinds = ", ".join(f"{k} {n}" for k, n in usage.failed_calls.most_common()) or "none"
        which = "; ".join(
            STAGE_FAILURES[stage].format(n=n, total=total) for stage, n in self.by_stage.items() if n
        )
        super().__init__(
            f"{failed} of {total} samples failed, above the allowed share of {budget:.0%}"
            + (f": {which}" if which else "")
            + f" (failed LLM calls by kind: {kinds})"
        )

    @staticmethod
    def stages_in(message: str) -> list[Stage]:
        """The stages a budget message (the error a failed trial keeps) names, in ``STAGE_FAILURES``
        order: trials that failed at different stages are different causes."""
        number = re.escape("{n}"), re.escape("{total}")
        patterns = {s: re.escape(t).replace(number[0], r"\d+").replace(number[1], r"\d+")
                    for s, t in STAGE_FAILURES.items()}
        return [s for s, pattern in patterns.items() if re.search(pattern, message)]


def allowed_failures(total: int, max_share: float) -> int:
    """How many of ``total`` samples may fail within ``max_share`` (a share of 0.1 of 20 allows 2)."""
    return math.floor(max_share * total + 1e-9)


class FailureBudget:
    """How many samples of a run may fail (retrieval, generation or a judge gave up) before the run fails.

    Counted over the whole run, not per batch: the run fails as soon as its failures exceed
    ``max_share`` of all its questions, which is exactly when the final share would; a first batch
    whose failures alone exceed it stops the run there (its pending calls are cancelled at the failure
    over the budget). Failures are counted by stage, and samples a fallback scored apart (``fallbacks``).
    """

    def __init__(self, total: int, max_share: float) -> None:
        self.total = total
        self.max_share = max_share
        self.allowed = allowed_failures(total, max_share)
        self.by_stage: Counter[Stage] = Counter()
        self.fallbacks = 0
        """Samples scored by a judge's deterministic fallback: no failures, but no judge's verdict."""

    @property
    def failed(self) -> int:
        return sum(self.by_stage.values())

    @property
    def remaining(self) -> int:
        return self.allowed - self.failed

    def spend(self, failed: int, usage: Usage, stage: Stage) -> None:
        """Count ``failed`` more samples of ``stage``; raise FailureBudgetExceeded once over the budget."""
        self.by_stage[stage] += failed
        if self.failed > self.allowed:
            raise FailureBudgetExceeded(self.failed, self.total, self.max_share, usage, self.by_stage)


def require_llm(metrics: Sequence[str], llm: object | None, judge_model: str | None = None) -> None:
    """A clear error when LLM metrics are asked for without an LLM, naming the setting to add."""
    wanted = [m for m in metrics if m in GENERATION_METRICS]
    if wanted and llm is None and judge_model is None:
        raise ComposerError(
            f"{', '.join(wanted)} need an LLM: set llm.model (or --llm MODEL); the judge defaults to it "
            "(judge.model or --judge MODEL picks another)"
        )


def make_judges(
    client: LLMClient, settings: JudgeSettings, embed: EmbedFn | None = None
) -> dict[str, LLMJudge]:
    """The judges for ``settings.metrics``, each with its deterministic fallback where one exists."""
    f1 = TokenF1Scorer() if settings.fallback or settings.blend else None
    overlap = OverlapFaithfulnessScorer() if settings.fallback or settings.blend else None
    blend = settings.blend
    judges: dict[str, LLMJudge] = {}
    for metric in settings.metrics:
        if metric == "answer_correctness":
            judges[metric] = AnswerCorrectnessJudge(
                client, embed=embed, weights=settings.correctness_weights, fallback=f1, blend=blend
            )
        elif metric == "faithfulness":
            judges[metric] = FaithfulnessJudge(client, fallback=overlap, blend=blend)
        elif metric == "llm_judge_rating":
            judges[metric] = RatingJudge(client, fallback=f1, blend=blend)
        elif metric == "answer_relevancy":
            if embed is None:
                raise ConfigError(
                    "answer_relevancy needs an embedding function (pass the pipeline's embedder)",
                    field="judge.metrics",
                )
            judges[metric] = AnswerRelevancyJudge(client, embed=embed, n=settings.relevancy_questions)
        elif metric == "context_precision":
            judges[metric] = ContextPrecisionJudge(client)
        elif metric == "context_recall":
            judges[metric] = ContextRecallJudge(client)
    own = settings.own_templates()
    for metric, judge in judges.items():  # one guidance for every judge of the panel
        judge.variant, judge.examples, judge.own_prompt = settings.variant, settings.examples, own.get(metric)
    return judges


async def ajudge_answers(
    questions: Sequence[Question],
    answers: Mapping[str, Answer],
    judges: Mapping[str, LLMJudge],
    *,
    max_failures: int | None = None,
    on_judged: Callable[[int], None] | None = None,
) -> dict[str, SampleResult]:
    """Question id -> every judge's verdict on its answer, graded against the answer's own contexts.

    Questions without an answer (or whose generation failed) are left out. As soon as more than
    ``max_failures`` samples have failed the calls still pending are cancelled, and the result holds only
    the samples judged by then (the caller's FailureBudget then fails the run).
    """

    async def sample(q: Question) -> SampleResult:
        answer = answers[q.id]
        result = SampleResult(q.id, prompt_language(q.question))
        verdicts: list[Verdict] = list(
            await asyncio.gather(*(j.ajudge(q, answer.text, answer.contexts, None) for j in judges.values()))
        )
        for name, verdict in zip(judges, verdicts, strict=True):
            result.metrics[name] = verdict.score.score
            result.reasons[name] = verdict.score.reason
            if verdict.details:
                result.details[name] = verdict.details
            if verdict.failed and verdict.score.score is None:
                result.failures.append(f"{name}: {verdict.score.reason}")
            elif verdict.failed:  # scored by the judge's fallback
                result.fallbacks.append(f"{name}: {verdict.score.reason}")
            if name == "faithfulness" and "grounded" in verdict.details and not verdict.failed:
                result.metrics["grounded"] = float(bool(verdict.details["grounded"]))
        if on_judged is not None:
            on_judged(1)
        return result

    todo = [q for q in questions if q.id in answers and not answers[q.id].failed]
    done, _ = await gather_until_failed([sample(q) for q in todo], lambda s: s.failed, max_failures)
    return {s.question_id: s for s in done}


def judge_answers(
    questions: Sequence[Question],
    answers: Mapping[str, Answer],
    judges: Mapping[str, LLMJudge],
    *,
    max_failures: int | None = None,
    on_judged: Callable[[int], None] | None = None,
) -> dict[str, SampleResult]:
    """The blocking form of ``ajudge_answers`` (run on the LLM loop, see ``run_sync``)."""
    return run_sync(
        ajudge_answers(questions, answers, judges, max_failures=max_failures, on_judged=on_judged)
    )
