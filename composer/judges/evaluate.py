"""Answer every question from its retrieved contexts and judge the answers: the LLM half of a trial.

``answer_and_judge`` is what the pipeline and the study call. A failed sample (generation or a judge gave
up after its retries) never fails the trial; when failed samples exceed ``max_failure_share`` the remaining
calls are cancelled and ``FailureBudgetExceeded`` carries the partial result and the reason.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from composer.data.types import Question, Run
from composer.errors import ComposerError, ConfigError
from composer.generation.answering import contexts_for
from composer.generation.generator import Generator
from composer.judges.base import EmbedFn, LLMJudge, Verdict
from composer.judges.context import ContextPrecisionJudge, ContextRecallJudge
from composer.judges.correctness import AnswerCorrectnessJudge, CorrectnessWeights
from composer.judges.faithfulness import FaithfulnessJudge
from composer.judges.rating import RatingJudge, rating_out_of_5
from composer.judges.relevancy import AnswerRelevancyJudge
from composer.llm.client import LLMClient, Result
from composer.llm.config import LLMConfig, judge_config
from composer.llm.prompt import prompt_language
from composer.llm.sync import gather_until_failed, run_sync
from composer.llm.usage import Usage, track_usage
from composer.metrics.refusal import is_refusal
from composer.metrics.scorers import OverlapFaithfulnessScorer, TokenF1Scorer

P = ParamSpec("P")
T = TypeVar("T")

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
    experiment's ``judge:`` block, ``JudgeConfig``, that ``answer_and_judge`` takes)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metrics: tuple[str, ...] = DEFAULT_JUDGE_METRICS
    correctness_weights: CorrectnessWeights = Field(default_factory=CorrectnessWeights)
    blend: float = Field(default=0.0, ge=0.0, le=1.0, description="weight of the deterministic scorer")
    fallback: bool = Field(default=True, description="use the deterministic scorer when the judge fails")
    max_failure_share: float = Field(default=0.1, ge=0.0, le=1.0)
    max_contexts: int = Field(default=5, ge=1, description="top hits given to the generator and the judges")
    relevancy_questions: int = Field(default=3, ge=1)

    @field_validator("metrics")
    @classmethod
    def _known(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [m for m in value if m not in JUDGE_METRICS]
        if unknown:
            raise ValueError(f"unknown judge metric(s) {unknown}; expected some of {list(JUDGE_METRICS)}")
        return tuple(dict.fromkeys(value))


@dataclass
class SampleResult:
    """One question's answer, metric values (None = not scored), reasons, failures and judge details."""

    question_id: str
    answer: str | None
    lang: str
    contexts: list[str]
    metrics: dict[str, float | None] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    details: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    generation: Result | None = None  # the answer call: tokens, latency, cached

    @property
    def failed(self) -> bool:
        return bool(self.failures)


@dataclass
class AnswerJudgeResult:
    """Every sample in question order, with the LLM usage (tokens, cost, failures) of producing them."""

    samples: list[SampleResult]
    usage: Usage
    metrics: tuple[str, ...]

    @property
    def answers(self) -> dict[str, str | None]:
        return {s.question_id: s.answer for s in self.samples}

    @property
    def per_sample(self) -> dict[str, dict[str, float | None]]:
        return {s.question_id: dict(s.metrics) for s in self.samples}

    @property
    def failed_samples(self) -> list[str]:
        return [s.question_id for s in self.samples if s.failed]

    @property
    def failed_share(self) -> float:
        return len(self.failed_samples) / len(self.samples) if self.samples else 0.0

    def summary(self) -> dict[str, float | None]:
        """Mean of every metric over the samples it was scored on, plus refusal and failure shares.

        ``llm_judge_rating`` stays on [0, 1] for the objective; ``llm_judge_rating_5`` is the x.x/5 figure.
        """
        out: dict[str, float | None] = {}
        keys = [*self.metrics, "grounded"] if "faithfulness" in self.metrics else list(self.metrics)
        for key in [*keys, "refusal", "refusal_accuracy"]:
            values = [v for s in self.samples if (v := s.metrics.get(key)) is not None]
            name = "answer_refusal_rate" if key == "refusal" else key
            out[name] = sum(values) / len(values) if values else None
        rating = out.get("llm_judge_rating")
        if "llm_judge_rating" in self.metrics:
            out["llm_judge_rating_5"] = rating_out_of_5(rating) if rating is not None else None
        out["failed_sample_share"] = self.failed_share
        return out

    def error_rates(self) -> dict[str, Any]:
        """error_rates.json: the usage's failures by kind plus the failed samples by stage."""
        stages = Counter(f.split(":", 1)[0] for s in self.samples for f in s.failures)
        return {
            **self.usage.error_rates(),
            "samples": len(self.samples),
            "failed_samples": len(self.failed_samples),
            "failed_sample_share": self.failed_share,
            "failed_samples_by_stage": dict(stages),
        }


class FailureBudgetExceeded(ComposerError):
    """More samples failed than the trial allows: the study marks the trial failed with this message."""

    def __init__(self, result: AnswerJudgeResult, failed: int, total: int, budget: float) -> None:
        self.result = result
        self.failed = failed
        self.total = total
        self.budget = budget
        kinds = ", ".join(f"{k} {n}" for k, n in result.usage.failed_calls.most_common()) or "none"
        super().__init__(
            f"{failed} of {total} samples failed, above the allowed share of {budget:.0%} "
            f"(failed LLM calls by kind: {kinds})"
        )


def allowed_failures(total: int, max_share: float) -> int:
    """How many of ``total`` samples may fail within ``max_share`` (a share of 0.1 of 20 allows 2)."""
    return math.floor(max_share * total + 1e-9)


def check_failure_budget(failed: int, total: int, max_share: float) -> bool:
    """Whether ``failed`` of ``total`` samples is still within ``max_share`` (the study's own check)."""
    return failed <= allowed_failures(total, max_share)


def require_llm(metrics: Sequence[str], llm: object | None, judge: object | None = None) -> None:
    """A clear error when LLM metrics are asked for without an LLM, naming the setting to add."""
    wanted = [m for m in metrics if m in GENERATION_METRICS]
    if wanted and llm is None and judge is None:
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
    return judges


def _client(value: LLMConfig | LLMClient | None, cache_dir: str | Path | None) -> LLMClient | None:
    if value is None or isinstance(value, LLMClient):
        return value
    return LLMClient(value, cache_dir=cache_dir)


async def aanswer_and_judge(
    questions: Sequence[Question],
    run: Run,
    corpus_texts: Mapping[str, str] | None,
    llm: LLMConfig | LLMClient | None,
    judge: LLMConfig | LLMClient | str | None = None,
    *,
    settings: JudgeSettings | None = None,
    metrics: Sequence[str] | None = None,
    template: str = "grounded",
    temperature: float | None = None,
    answers: Mapping[str, str] | None = None,
    embed: EmbedFn | None = None,
    cache_dir: str | Path | None = None,
) -> AnswerJudgeResult:
    """Generate an answer per question from its top hits in ``run`` and judge it.

    ``corpus_texts`` maps hit (or document) ids to text for hits that carry none. ``judge`` is a config,
    a client, or a model name inheriting ``llm``'s settings; by default the generator's model judges, at
    temperature 0. ``answers`` (question id -> text) skips generation, e.g. to judge extractive answers.
    ``metrics`` overrides ``settings.metrics``. ``embed`` feeds answer_correctness' similarity term and
    answer_relevancy. Raises ComposerError naming the setting when no LLM is configured, and
    FailureBudgetExceeded when too many samples fail.
    """
    settings = settings or JudgeSettings()
    if metrics is not None:
        settings = JudgeSettings.model_validate({**settings.model_dump(), "metrics": tuple(metrics)})
    if answers is None:
        require_llm(("answer_refusal_rate", *settings.metrics), llm)
    gen_client = _client(llm, cache_dir)
    judge_client = _judge_client(llm, judge, gen_client, cache_dir) if settings.metrics else None
    if settings.metrics and judge_client is None:
        require_llm(settings.metrics, None)
    generator = Generator(gen_client, template, temperature, settings.max_contexts) if gen_client else None
    judges = make_judges(judge_client, settings, embed) if judge_client is not None else {}

    async def sample(q: Question) -> SampleResult:
        contexts = contexts_for(run.get(q.id, []), corpus_texts, settings.max_contexts)
        result = SampleResult(q.id, None, prompt_language(q.question), contexts)
        if answers is not None and q.id in answers:
            result.answer = answers[q.id]
        elif generator is not None:
            generated = await generator.agenerate(q.question, contexts)
            result.generation = generated.result
            if generated.failed:
                outcome = generated.result
                kind = outcome.error_kind if outcome is not None else "other"
                result.failures.append(f"generation: {kind}")
                reason = f"generation failed ({kind}: {outcome.error if outcome else ''})"
                result.metrics = dict.fromkeys(judges, None)
                result.reasons = dict.fromkeys(judges, reason)
                return result
            result.answer = generated.text
        else:
            raise ComposerError(
                f"no answer for question {q.id!r} and no LLM to generate one: set llm.model (or --llm)"
            )
        verdicts: list[Verdict] = list(
            await asyncio.gather(*(j.ajudge(q, result.answer, contexts, None) for j in judges.values()))
        )
        for name, verdict in zip(judges, verdicts, strict=True):
            result.metrics[name] = verdict.score.score
            result.reasons[name] = verdict.score.reason
            if verdict.details:
                result.details[name] = verdict.details
            if verdict.failed:
                result.failures.append(f"{name}: {verdict.score.reason}")
            if name == "faithfulness" and "grounded" in verdict.details and not verdict.failed:
                result.metrics["grounded"] = float(bool(verdict.details["grounded"]))
        refused = is_refusal(result.answer or "")
        result.metrics["refusal"] = float(refused)
        if not q.gold_answers:
            result.metrics["refusal_accuracy"] = float(refused)
        return result

    with track_usage() as usage:
        samples = await _run_within_budget(
            [sample(q) for q in questions], settings.max_failure_share, usage, settings.metrics
        )
    order = {q.id: i for i, q in enumerate(questions)}
    samples.sort(key=lambda s: order[s.question_id])
    return AnswerJudgeResult(samples, usage, settings.metrics)


def _judge_client(
    llm: LLMConfig | LLMClient | None,
    judge: LLMConfig | LLMClient | str | None,
    gen_client: LLMClient | None,
    cache_dir: str | Path | None,
) -> LLMClient | None:
    """The judge's client: the one given, else one at temperature 0 on the judge model."""
    if isinstance(judge, LLMClient):
        return judge
    base = llm.config if isinstance(llm, LLMClient) else llm
    config = judge_config(base, judge)
    if config is None:
        return None
    if gen_client is not None and config == gen_client.config:
        return gen_client
    return LLMClient(config, cache_dir=cache_dir)


async def _run_within_budget(
    coroutines: list[Any], max_share: float, usage: Usage, metrics: tuple[str, ...]
) -> list[SampleResult]:
    """Run all samples concurrently; cancel the rest as soon as the failures exceed the budget."""
    total = len(coroutines)
    done, failed = await gather_until_failed(
        coroutines, lambda sample: sample.failed, allowed_failures(total, max_share)
    )
    if not check_failure_budget(failed, total, max_share):
        raise FailureBudgetExceeded(AnswerJudgeResult(done, usage, metrics), failed, total, max_share)
    return done


def blocking(async_fn: Callable[P, Coroutine[Any, Any, T]], name: str) -> Callable[P, T]:
    """``async_fn`` as a plain function called ``name``, with the same parameters: run to completion on
    the LLM loop (``run_sync``), so sync callers need no event loop of their own."""

    def call(*args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(async_fn(*args, **kwargs))

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"The blocking form of ``{async_fn.__name__}``: {async_fn.__doc__ or ''}"
    return call


answer_and_judge = blocking(aanswer_and_judge, "answer_and_judge")
