"""Score a configured pipeline end to end: rank, answer, judge and evaluate, batch by batch.

``score_pipeline`` is the one scoring path of ``composer eval --config`` and of every study trial, so an
exported winner re-scored by ``composer eval`` goes through exactly the code that chose it. Work nobody
asked for is not done: without ``answers`` (a retrieval-only objective) nothing is answered. Stages that
call an LLM run batch by batch, so a pruner can stop a poor trial before it pays for the rest; without
one, every question is ranked and scored at once (arrays) and the batches are only pruning steps.
Failed samples are counted, never fatal, until they exceed the run's failure budget.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from composer.data.ranking import Ranking
from composer.data.types import Corpus, Question, QuestionSet
from composer.evaluation.columns import score_ranking
from composer.evaluation.judging import Judging
from composer.evaluation.report import EvaluationReport, SampleTable, StageError, concat_tables
from composer.generation import Answer
from composer.index.bm25 import Progress
from composer.judges import (
    FailureBudget,
    FailureBudgetExceeded,
    JudgeSettings,
    SampleResult,
    judge_answers,
    rating_out_of_5,
)
from composer.judges.panel import JUDGE_FALLBACK, JUDGE_FALLBACK_SHARE, Stage
from composer.llm import Usage, track_usage
from composer.metrics.matching import MatchMode, Universe, default_match_mode
from composer.metrics.refusal import is_refusal

if TYPE_CHECKING:
    from composer.pipeline.pipeline import Pipeline

logger = logging.getLogger(__name__)

DEFAULT_KS = (1, 3, 5, 10)
LLM_META = "llm"
"""Report meta key of the LLM section: models, usage (tokens, cost), error rates, the x.x/5 rating."""
COST_STAGES = ("expand", "retrieve", "rerank", "generate")
"""Stages a user waits for: their latencies make ``latency_ms`` (judging is the evaluation's, not theirs)."""


@dataclass
class Scored:
    """A pipeline's scores on a question set, with the answers and what producing them cost."""

    report: EvaluationReport
    answerer: str
    answers: dict[str, Answer] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    judge_model: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall time per part of the scoring: rank (of which search: the index searches), answer, judge,
    metrics, steps (the pruner's reports)."""

    def secondary_metrics(self) -> dict[str, float]:
        """Cost metrics: mean latency per question (what a user waits for) and mean context size."""
        latency = self.report.latency_ms()
        waited = sum(latency[stage]["mean"] for stage in COST_STAGES if stage in latency)
        out = {"latency_ms": waited, "context_tokens": self.report.mean_context_tokens()}
        if self.usage.calls and len(self.report):
            out["llm_cost_per_question_usd"] = self.usage.cost / len(self.report)
        return out

    def llm_metrics(self) -> dict[str, float]:
        """``usage_metrics`` plus the judge's rating on its 1-5 scale (``llm_judge_rating_5``) and, with a
        judge, the share of samples its deterministic fallback scored (``judge_fallback``)."""
        out = usage_metrics(self.usage)
        rates = self.report.meta.get(LLM_META, {}).get("error_rates", {})
        if self.judge_model is not None and JUDGE_FALLBACK_SHARE in rates:
            out[JUDGE_FALLBACK] = float(rates[JUDGE_FALLBACK_SHARE])
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


class RankingPipeline(Protocol):
    """What scoring needs of whatever produces a batch: Composer's ``Pipeline`` or a user's system
    (``composer.evaluation.system.SystemPipeline``)."""

    searched: float
    """Seconds spent in index searches so far (a memoized search costs none)."""

    @property
    def failed(self) -> Mapping[str, StageError]:
        """Questions whose retrieval failed in the last ``rank`` call (failed samples, not fatal)."""
        ...

    @property
    def answerer(self) -> str:
        """Who answers: "extractive", "llm:<model>", "system:<name>"."""
        ...

    @property
    def generator_model(self) -> str | None: ...

    @property
    def can_answer(self) -> bool: ...

    def batched(self, answering: bool) -> bool:
        """Whether scoring calls something slow or paid per question (an LLM, a user's system), and so
        runs batch by batch: a pruner may stop it between batches."""
        ...

    def universe(self) -> Universe | None: ...

    def rank(self, questions: Sequence[Question]) -> tuple[Ranking, dict[str, np.ndarray]]: ...

    def answer(
        self,
        questions: Sequence[Question],
        ranking: Ranking,
        *,
        max_failures: int | None = None,
        on_answer: Callable[[int], None] | None = None,
    ) -> dict[str, Answer]: ...


BatchHook = Callable[[int, EvaluationReport], None]
"""``hook(step, report so far)`` after each batch; raising (optuna.TrialPruned) stops the scoring."""


def score_pipeline(
    pipeline: RankingPipeline,
    questions: QuestionSet,
    corpus: Corpus | None,
    *,
    judging: Judging | None = None,
    ks: Sequence[int] = DEFAULT_KS,
    batch_size: int = 50,
    match: MatchMode | None = None,
    answers: bool = True,
    on_batch: BatchHook | None = None,
    on_stage: Progress | None = None,
    on_failure: Callable[[Scored], None] | None = None,
) -> Scored:
    """Rank, answer (when ``answers`` or a judge asks), judge and score ``questions`` (the pipeline must be
    indexed), reporting the report so far after every ``batch_size`` questions.

    Every LLM call made meanwhile (expansion, reranking, generation, judging) is counted in
    ``Scored.usage``. More failed samples than the judge settings' ``max_failure_share`` of the questions
    raise FailureBudgetExceeded, once their batch is scored: whatever stops the scoring, ``on_failure``
    gets the scores so far (a failed trial keeps its evidence).
    """
    mode = match or default_match_mode(questions, corpus)
    items = list(questions)
    total = len(items)
    answering = pipeline.can_answer and (answers or judging is not None)
    universe = pipeline.universe()
    settings = judging.settings if judging is not None else JudgeSettings()
    budget = FailureBudget(total, settings.max_failure_share)
    unit = batch_size if judging is not None or pipeline.batched(answering) else max(total, 1)
    info: dict[str, Any] = {
        "questions": questions.source,
        "questions_fingerprint": questions.fingerprint(),
        "corpus": None if corpus is None else corpus.source,
    }
    with track_usage() as usage:
        progress = _Progress(on_stage, total)
        run = _Batches(pipeline, judging, corpus, ks, mode, universe, budget, usage, progress)
        try:
            for lo in range(0, total, unit):
                run.score(items[lo : lo + unit], answering)
                if on_batch is not None:
                    run.report_steps(on_batch, batch_size, total, info)
        except Exception:
            if on_failure is not None and run.tables:
                on_failure(run.result(info))
            raise
    return run.result(info)


@dataclass
class _Batches:
    """One scoring run's batches: what they share (the pipeline, the judges, the failure budget they
    spend, the LLM usage they count) and what they add up (tables, answers, seconds per part, pruning
    steps reported), so that each part of a batch is a step of its own."""

    pipeline: RankingPipeline
    judging: Judging | None
    corpus: Corpus | None
    ks: Sequence[int]
    mode: MatchMode
    universe: Universe | None
    budget: FailureBudget
    usage: Usage
    progress: _Progress
    tables: list[SampleTable] = field(default_factory=list)
    answers: dict[str, Answer] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    scored: int = 0
    """Questions scored so far (the batches' tables hold them in order)."""
    steps: int = 0
    """Pruning steps reported so far."""
    exceeded: FailureBudgetExceeded | None = None
    """The failure budget's error, raised once the batch that exceeded it has its table."""

    def result(self, info: dict[str, Any]) -> Scored:
        """The batches' scores so far, with the LLM section of the report when an LLM was called."""
        table = concat_tables(self.tables) if self.tables else SampleTable((), ())
        report = EvaluationReport(table, tuple(sorted(set(self.ks))), self.mode, info)
        judge_model = self.judging.model if self.judging is not None else None
        if self.usage.calls:
            section = _llm_section(report, self.usage, self.budget, self.pipeline.generator_model,
                                   judge_model)
            report = report.with_meta({LLM_META: section})
        return Scored(report, self.pipeline.answerer, answers=self.answers, usage=self.usage,
                      judge_model=judge_model, seconds=self.seconds)

    def _spend(self, failed: int, stage: Stage) -> None:
        """Count ``failed`` samples of ``stage``; the budget's error waits until the batch has its table."""
        try:
            self.budget.spend(failed, self.usage, stage)
        except FailureBudgetExceeded as exc:
            self.exceeded = exc

    def score(self, batch: Sequence[Question], answering: bool) -> None:
        """Rank, answer (when ``answering``) and judge one batch, and add its table of scores."""
        ranking, latency, failed = self._rank(batch)
        answers: dict[str, Answer] | None = None
        judged: dict[str, SampleResult] = {}
        answer_s = judge_s = 0.0
        if answering and self.exceeded is None:
            answers, answer_s = self._answer(batch, ranking)
            if self.judging is not None and self.exceeded is None:
                judged, judge_s = self._judge(batch, answers, self.judging)
        with _timed(self.seconds, "metrics"):
            given = answers or {}
            table = score_ranking(
                batch,
                ranking,
                ks=self.ks,
                mode=self.mode,
                corpus=self.corpus,
                universe=self.universe,
                answers=None if answers is None else {q: a.text for q, a in given.items()},
                contexts=None if answers is None else {q: a.contexts for q, a in given.items()},
                # What each question searched: Composer's pipeline knows (conversation stage), a system not.
                searched=getattr(self.pipeline, "searched_queries", None),
            )
            table.latency.update(latency)
            for row, q in enumerate(batch):
                if q.id in failed:
                    table.errors[row] = failed[q.id]
            if answers is not None:
                _merge_answers(table, batch, answers, answer_s, judged, self.judging, judge_s)
            self.tables.append(table)
        self.scored += len(batch)
        if self.exceeded is not None:
            raise self.exceeded

    def _rank(
        self, batch: Sequence[Question]
    ) -> tuple[Ranking, dict[str, np.ndarray], dict[str, StageError]]:
        """Rank a batch (its index searches timed apart) and charge its failed retrievals to the budget."""
        searched = self.pipeline.searched
        with _timed(self.seconds, "rank"):
            ranking, latency = self.pipeline.rank(batch)
        self.seconds["search"] = self.seconds.get("search", 0.0) + self.pipeline.searched - searched
        self.progress.add("retrieved", len(batch))
        failed = dict(self.pipeline.failed)
        self._spend(len(failed), "retrieval")
        return ranking, latency, failed

    def _answer(self, batch: Sequence[Question], ranking: Ranking) -> tuple[dict[str, Answer], float]:
        """Answer a batch within what is left of the failure budget; its answers and seconds per question."""
        t0 = time.perf_counter()
        answers = self.pipeline.answer(
            batch,
            ranking,
            max_failures=self.budget.remaining,
            on_answer=lambda n: self.progress.add("answered", n),
        )
        answer_s = (time.perf_counter() - t0) / len(batch)
        self.seconds["answer"] = self.seconds.get("answer", 0.0) + answer_s * len(batch)
        self._spend(sum(a.failed for a in answers.values()) + len(batch) - len(answers), "generation")
        self.answers.update(answers)
        return answers, answer_s

    def _judge(
        self, batch: Sequence[Question], answers: dict[str, Answer], judging: Judging
    ) -> tuple[dict[str, SampleResult], float]:
        """Judge a batch's answers within what is left of the failure budget; verdicts, seconds a question."""
        t1 = time.perf_counter()
        judged = judge_answers(
            batch,
            answers,
            judging.judges,
            max_failures=self.budget.remaining,
            on_judged=lambda n: self.progress.add("judged", n),
        )
        judge_s = (time.perf_counter() - t1) / len(batch)
        self.seconds["judge"] = self.seconds.get("judge", 0.0) + judge_s * len(batch)
        self.budget.fallbacks += sum(s.fell_back for s in judged.values())
        self._spend(sum(s.failed for s in judged.values()), "judge")
        return judged, judge_s

    def report_steps(self, on_batch: BatchHook, batch_size: int, total: int, info: dict[str, Any]) -> None:
        """Report the report so far at every ``batch_size`` questions now scored: a batch of the whole set
        (no LLM) makes several pruning steps at once, each over its first questions. The tables are joined
        once a call, not once a step."""
        joined: SampleTable | None = None
        while self.steps * batch_size < self.scored:
            end = min((self.steps + 1) * batch_size, total)
            if end > self.scored:
                break
            with _timed(self.seconds, "steps"):
                joined = concat_tables(self.tables) if joined is None else joined
                on_batch(self.steps, EvaluationReport(joined.head(end), self.ks, self.mode, info))
            self.steps += 1


@contextmanager
def _timed(seconds: dict[str, float], stage: str) -> Iterator[None]:
    """Add the block's wall time to ``seconds[stage]`` (a pruned trial's stops mid-block: still counted)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        seconds[stage] = seconds.get(stage, 0.0) + time.perf_counter() - started


class _Progress:
    """Counts of questions retrieved, answered and judged so far, sent to a Progress."""

    def __init__(self, hook: Progress | None, total: int) -> None:
        self.hook = hook
        self.total = total
        self.done: dict[str, int] = {}

    def add(self, stage: str, n: int) -> None:
        if self.hook is not None:
            self.done[stage] = self.done.get(stage, 0) + n
            self.hook(stage, self.done[stage], self.total)


def _merge_answers(
    table: SampleTable,
    batch: Sequence[Question],
    answers: Mapping[str, Answer],
    answer_s: float,
    judged: Mapping[str, SampleResult],
    judging: Judging | None,
    judge_s: float,
) -> None:
    """Join the batch's generation outcomes, judge verdicts, refusal metrics and latencies to its table."""
    n = len(batch)
    generate = np.full(n, answer_s)
    judged_names = list(judging.settings.metrics) if judging is not None else []
    if judging is not None and "faithfulness" in judged_names:
        judged_names.append("grounded")
    columns = {name: np.full(n, np.nan) for name in (*judged_names, "refusal_accuracy")}
    skipped_answer = table.skipped.setdefault("answer", [None] * n)
    for row, q in enumerate(batch):
        answer = answers.get(q.id)
        if answer is None or answer.failed:
            outcome = answer.result if answer is not None else None
            kind = (outcome.error_kind if outcome is not None else None) or "other"
            table.errors[row] = StageError(
                "generation", kind, (outcome.error if outcome is not None else None) or ""
            )
            skipped_answer[row] = "generation_failed"
            continue
        if answer.result is not None:
            generate[row] = answer.result.latency
        if not q.gold_answers:
            columns["refusal_accuracy"][row] = float(is_refusal(answer.text or ""))
        sample = judged.get(q.id)
        if sample is None:
            continue
        for name, value in sample.metrics.items():
            if name in columns and value is not None:
                columns[name][row] = value
        if sample.reasons:
            table.reasons[row] = dict(sample.reasons)
        if sample.failures and row not in table.errors:
            metric, _, reason = sample.failures[0].partition(": ")
            table.errors[row] = StageError("judge", metric, reason)
    if all(r is None for r in skipped_answer):
        del table.skipped["answer"]
    configured = judging.settings.metrics if judging is not None else ()
    for name, column in columns.items():
        if name in configured or not np.isnan(column).all():
            table.metrics[name] = column
    table.latency["generate"] = generate
    if judging is not None:
        table.latency["judge"] = np.full(n, judge_s)


def _llm_section(
    report: EvaluationReport, usage: Usage, budget: FailureBudget, generator: str | None,
    judge_model: str | None,
) -> dict[str, Any]:
    stages = {stage: sum(kinds.values()) for stage, kinds in report.error_counts().items()}
    rating = report.means().get("llm_judge_rating")
    return {
        "generator": generator,
        "judge": judge_model,
        "usage": usage.to_dict(),
        "llm_judge_rating": None if rating is None else f"{rating_out_of_5(rating):.1f}/5",
        "error_rates": {
            **usage.error_rates(),
            "samples": len(report),
            "failed_samples": budget.failed,
            "failed_sample_share": budget.failed / len(report) if len(report) else 0.0,
            "allowed_failed_share": budget.max_share,
            "judge_fallback_samples": budget.fallbacks,
            JUDGE_FALLBACK_SHARE: budget.fallbacks / len(report) if len(report) else 0.0,
            "failed_samples_by_stage": stages,
        },
    }


def evaluate_pipeline(
    pipeline: Pipeline,
    corpus: Corpus | None,
    questions: QuestionSet,
    *,
    ks: Sequence[int] = DEFAULT_KS,
    match: MatchMode | None = None,
    judging: Judging | None = None,
) -> EvaluationReport:
    """Index ``corpus`` (or reuse its index; None: reopen the one saved for the config in the pipeline's
    work dir, reading no corpus), then ``score_pipeline`` in one batch; the report's meta adds the index
    key, the pipeline config and cache counters, so a second identical run visibly encodes nothing."""
    started = time.perf_counter()
    if corpus is not None:
        info = pipeline.index(corpus)
        index = {"key": info.key, "chunks": info.n_chunks, "reused": info.reused, "seconds": info.seconds}
    else:
        index = {"key": pipeline.key, "chunks": len(pipeline.handle.chunks), "reused": True,
                 "seconds": time.perf_counter() - started}
    scored = score_pipeline(
        pipeline, questions, corpus, judging=judging, ks=ks, match=match, batch_size=max(len(questions), 1)
    )
    meta = {
        "index": index,
        "pipeline": pipeline.config.to_dict(),
        "cache": pipeline.cache_stats,
    }
    return scored.report.with_meta(meta)
