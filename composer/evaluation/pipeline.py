"""Score a configured pipeline end to end: retrieve, answer, judge and evaluate, batch by batch.

``score_pipeline`` is the one scoring path of ``composer eval --config`` and of every study trial, so an
exported winner re-scored by ``composer eval`` goes through exactly the code that chose it. Answers come
from ``Pipeline.answer`` (the LLM generator, or the offline extractive answerer); with ``Judging`` an LLM
judge grades them too and its metrics join the report (answer_correctness, faithfulness, ...). Failed
samples are counted, never fatal, until they exceed the run's failure budget.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from composer.data.types import Corpus, Question, QuestionSet, Run
from composer.errors import ConfigError
from composer.evaluation.evaluate import evaluate_run
from composer.evaluation.report import EvaluationReport, SampleRecord, StageError
from composer.generation import Answer
from composer.judges import (
    JUDGE_METRICS,
    AnswerJudgeResult,
    EmbedFn,
    FailureBudgetExceeded,
    JudgeConfig,
    JudgeSettings,
    SampleResult,
    allowed_failures,
    answer_and_judge,
    rating_out_of_5,
)
from composer.llm import LLMClient, LLMConfig, Usage, track_usage
from composer.metrics.matching import MatchMode, default_match_mode
from composer.metrics.refusal import is_refusal

if TYPE_CHECKING:
    from composer.pipeline.config import PipelineConfig
    from composer.pipeline.pipeline import IndexInfo, Pipeline

logger = logging.getLogger(__name__)

DEFAULT_KS = (1, 3, 5, 10)
LLM_META = "llm"
"""Report meta key of the LLM section: models, usage (tokens, cost), error rates, the x.x/5 rating."""


@dataclass(frozen=True)
class Judging:
    """The judges of a run: one client (one model, temperature 0) shared by every batch and trial."""

    client: LLMClient
    settings: JudgeSettings
    embed: EmbedFn | None = None

    @property
    def model(self) -> str:
        return self.client.config.model


def make_judging(
    judge: JudgeConfig, llm: LLMConfig | None, workdir: Path, *, also: Sequence[str] = ()
) -> Judging:
    """The judge of a run from its ``judge:`` settings over the generator's ``llm`` settings; ``also``
    adds judge metrics (those an objective weighs). Replies are cached under ``<workdir>/cache/llm``."""
    from composer.pipeline.pipeline import shared_client, shared_embedder

    config = judge.llm_config(llm)
    if config is None:
        raise ConfigError("the judge needs a model: set judge.model or llm.model (or --judge / --llm)",
                          field="judge.model")
    extra = [m for m in also if m in JUDGE_METRICS and m not in judge.metrics]
    if extra:
        judge = judge.model_copy(update={"metrics": (*judge.metrics, *extra)})
    embed: EmbedFn | None = None
    if judge.embedding is not None and judge.needs_embedding():
        from composer.embedding import CachedEmbedder, EmbeddingCache

        cache = EmbeddingCache(workdir / "cache" / "embeddings")
        embed = CachedEmbedder(shared_embedder(judge.embedding), cache).encode_queries
    return Judging(shared_client(config, workdir / "cache" / "llm"), judge.settings, embed)


class FailureBudget:
    """How many samples of a run may fail (generation or a judge gave up) before the run fails.

    Counted over the whole run, not per batch: the run fails as soon as its failures exceed
    ``max_share`` of all its questions, which is exactly when the final share would.
    """

    def __init__(self, total: int, max_share: float) -> None:
        self.total = total
        self.max_share = max_share
        self.allowed = allowed_failures(total, max_share)
        self.failed = 0

    @property
    def remaining(self) -> int:
        return self.allowed - self.failed

    def spend(self, failed: int, usage: Usage, metrics: tuple[str, ...]) -> None:
        """Count ``failed`` more samples; raise FailureBudgetExceeded once over the budget."""
        self.failed += failed
        if self.failed > self.allowed:
            raise FailureBudgetExceeded(
                AnswerJudgeResult([], usage, metrics), self.failed, self.total, self.max_share
            )


@dataclass(frozen=True)
class QuestionTiming:
    """Where one question's time went; expand, retrieve, rerank and judge are amortized over its batch,
    generate is the question's own LLM call (or its share of the extractive answerer's batch)."""

    batch_start_ns: int
    batch_size: int
    retrieve_s: float
    rerank_s: float
    generate_s: float
    judge_s: float
    expand_s: float = 0.0


@dataclass
class Scored:
    """A pipeline's scores on a question set, with what a trace needs to show each question."""

    report: EvaluationReport
    run: Run
    timings: dict[str, QuestionTiming]
    answerer: str
    answers: dict[str, Answer] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    judge: str | None = None

    def secondary_metrics(self) -> dict[str, float]:
        """Cost metrics: mean latency per question and mean context size (whitespace tokens of all k hits)."""
        n = max(len(self.timings), 1)
        latency = sum(
            t.expand_s + t.retrieve_s + t.rerank_s + t.generate_s for t in self.timings.values()
        ) / n
        counts = [s.context_tokens for s in self.report.samples if s.context_tokens is not None]
        return {"latency_ms": 1000.0 * latency, "context_tokens": sum(counts) / max(len(counts), 1)}

    def llm_metrics(self) -> dict[str, float]:
        """``usage_metrics`` plus the judge's rating on its 1-5 scale (``llm_judge_rating_5``)."""
        out = usage_metrics(self.usage)
        rating = self.report.means().get("llm_judge_rating")
        if rating is not None:
            out["llm_judge_rating_5"] = rating_out_of_5(rating)
        return out


def usage_metrics(usage: Usage) -> dict[str, float]:
    """Tokens, cost, calls (cached) and failed requests by kind, as metrics; empty without LLM calls."""
    if usage.calls == 0:
        return {}
    out = {k: float(v) for k, v in usage.to_dict().items()}
    out.update({f"llm_failed_requests_{kind}": float(n) for kind, n in usage.failed_attempts.items()})
    return out


class RetrievalPipeline(Protocol):
    """What scoring needs of a pipeline (composer.pipeline.pipeline.Pipeline is the real one)."""

    config: PipelineConfig

    def index(self, corpus: Corpus) -> IndexInfo: ...

    def universe(self) -> Mapping[str, tuple[str, str]]: ...

    def retrieve_timed(self, questions: Sequence[Question]) -> tuple[Run, dict[str, dict[str, float]]]: ...

    def answer(
        self, questions: Sequence[Question], run: Run, *, max_failures: int | None = None
    ) -> dict[str, Answer]: ...


BatchHook = Callable[[int, EvaluationReport], None]
"""``hook(step, report so far)`` after each batch; raising (optuna.TrialPruned) stops the scoring."""


def score_pipeline(
    pipeline: RetrievalPipeline,
    questions: QuestionSet,
    corpus: Corpus,
    *,
    judging: Judging | None = None,
    ks: Sequence[int] = DEFAULT_KS,
    batch_size: int = 50,
    match: MatchMode | None = None,
    on_batch: BatchHook | None = None,
) -> Scored:
    """Retrieve, answer, judge and score ``questions`` batch by batch (the pipeline must be indexed).

    Each batch is evaluated once and its records appended, so scoring stays linear in the questions; the
    match mode is fixed for the whole set so every batch is judged alike. Every LLM call made meanwhile
    (expansion, reranking, generation, judging) is counted in ``Scored.usage``. More failed samples than
    the judge settings' ``max_failure_share`` of the questions raise FailureBudgetExceeded.
    """
    mode = match or default_match_mode(questions, corpus)
    universe = pipeline.universe()
    info: dict[str, Any] = {"questions": questions.source, "questions_fingerprint": questions.fingerprint(),
                            "corpus": corpus.source}
    settings = judging.settings if judging is not None else JudgeSettings()
    budget = FailureBudget(len(questions), settings.max_failure_share)
    generation = pipeline.config.generation
    items = list(questions)
    run: Run = {}
    timings: dict[str, QuestionTiming] = {}
    answers: dict[str, Answer] = {}
    samples: list[SampleRecord] = []
    report = EvaluationReport([], ks, mode, info)
    with track_usage() as usage:
        for step, lo in enumerate(range(0, len(items), batch_size)):
            batch = items[lo : lo + batch_size]
            started = time.time_ns()
            batch_run, latency = pipeline.retrieve_timed(batch)
            t0 = time.perf_counter()
            batch_answers = pipeline.answer(batch, batch_run, max_failures=budget.remaining)
            answer_s = (time.perf_counter() - t0) / len(batch)
            t1 = time.perf_counter()
            judged = _judge(batch, batch_run, batch_answers, judging, generation.max_contexts, budget, usage)
            texts = {qid: a.text for qid, a in batch_answers.items() if a.text is not None}
            batch_report = evaluate_run(QuestionSet(batch, questions.source), batch_run, ks=ks, match=mode,
                                        corpus=corpus, universe=universe, answers=texts)
            judge_s = (time.perf_counter() - t1) / len(batch)
            for q, record in zip(batch, batch_report.samples, strict=True):
                answer = batch_answers[q.id]
                _merge(record, q, answer, judged, judging)
                lat = latency.get(q.id, {})
                generate_s = answer.result.latency if answer.result is not None else answer_s
                record.latency = {**lat, "generate": generate_s, "judge": judge_s}
                timings[q.id] = QuestionTiming(started, len(batch), lat.get("retrieve", 0.0),
                                               lat.get("rerank", 0.0), generate_s, judge_s,
                                               lat.get("expand", 0.0))
            run.update(batch_run)
            answers.update(batch_answers)
            samples.extend(batch_report.samples)
            report = EvaluationReport(samples, batch_report.ks, mode, info)
            if on_batch is not None:
                on_batch(step, report)
    gen_model = generation.model
    judge_model = judging.model if judging is not None else None
    if usage.calls:
        section = _llm_section(report, usage, budget, gen_model, judge_model)
        report = EvaluationReport(samples, report.ks, mode, {**info, LLM_META: section})
    return Scored(report, run, timings, f"llm:{gen_model}" if gen_model else "extractive", answers=answers,
                  usage=usage, judge=judge_model)


def _judge(
    batch: list[Question],
    run: Run,
    answers: Mapping[str, Answer],
    judging: Judging | None,
    max_contexts: int,
    budget: FailureBudget,
    usage: Usage,
) -> dict[str, SampleResult]:
    """Judge the batch's answers (those generated); failures count against the run's budget."""
    metrics = judging.settings.metrics if judging is not None else ()
    budget.spend(sum(a.failed for a in answers.values()), usage, metrics)  # raises when generation stopped
    answered = [q for q in batch if not answers[q.id].failed]
    if judging is None or not answered:
        return {}
    # The judges may fail only as many samples as the run has left: answer_and_judge stops at once then.
    share = min(budget.remaining / len(answered), 1.0)
    settings = judging.settings.model_copy(update={"max_failure_share": share, "max_contexts": max_contexts})
    texts = {q.id: answers[q.id].text or "" for q in answered}
    try:
        result = answer_and_judge(answered, run, None, None, judging.client, settings=settings,
                                  answers=texts, embed=judging.embed)
    except FailureBudgetExceeded as exc:
        budget.spend(exc.failed, usage, metrics)  # over the run's budget by construction: raises for the run
        raise
    budget.spend(len(result.failed_samples), usage, metrics)
    return {s.question_id: s for s in result.samples}


def _merge(
    record: SampleRecord,
    question: Question,
    answer: Answer,
    judged: Mapping[str, SampleResult],
    judging: Judging | None,
) -> None:
    """Join one question's generation outcome, judge verdicts and refusal metrics to its record."""
    if answer.failed:
        outcome = answer.result
        kind = (outcome.error_kind if outcome is not None else None) or "other"
        record.error = StageError("generation", kind, (outcome.error if outcome is not None else None) or "")
        record.skipped["answer"] = "generation_failed"
    if judging is not None:
        record.metrics.update(dict.fromkeys(judging.settings.metrics, None))
    sample = judged.get(question.id)
    if sample is not None:
        for name, value in sample.metrics.items():
            if name not in ("refusal", "refusal_accuracy"):  # counted below for every answerer
                record.metrics[name] = value
        record.reasons.update(sample.reasons)
        if sample.failures and record.error is None:
            metric, _, reason = sample.failures[0].partition(": ")
            record.error = StageError("judge", metric, reason)
    if not question.gold_answers and not answer.failed:
        record.metrics["refusal_accuracy"] = float(is_refusal(answer.text or ""))


def _llm_section(
    report: EvaluationReport, usage: Usage, budget: FailureBudget, generator: str | None, judge: str | None
) -> dict[str, Any]:
    stages = {stage: sum(kinds.values()) for stage, kinds in report.error_counts().items()}
    rating = report.means().get("llm_judge_rating")
    return {
        "generator": generator,
        "judge": judge,
        "usage": usage.to_dict(),
        "llm_judge_rating": None if rating is None else f"{rating_out_of_5(rating):.1f}/5",
        "error_rates": {
            **usage.error_rates(),
            "samples": len(report.samples),
            "failed_samples": budget.failed,
            "failed_sample_share": budget.failed / len(report.samples) if report.samples else 0.0,
            "allowed_failed_share": budget.max_share,
            "failed_samples_by_stage": stages,
        },
    }


def evaluate_pipeline(
    pipeline: Pipeline,
    corpus: Corpus,
    questions: QuestionSet,
    *,
    ks: Sequence[int] = DEFAULT_KS,
    match: MatchMode | None = None,
    judging: Judging | None = None,
) -> EvaluationReport:
    """Index (or reuse), then ``score_pipeline`` in one batch; the report's meta adds the index key, the
    pipeline config and cache counters, so a second identical run visibly encodes nothing."""
    info = pipeline.index(corpus)
    scored = score_pipeline(pipeline, questions, corpus, judging=judging, ks=ks, match=match,
                            batch_size=max(len(questions), 1))
    meta = {
        "index": {"key": info.key, "chunks": info.n_chunks, "reused": info.reused, "seconds": info.seconds},
        "pipeline": pipeline.config.to_dict(),
        "cache": pipeline.cache_stats,
    }
    report = scored.report
    return EvaluationReport(report.samples, report.ks, report.match_mode, {**report.meta, **meta})
