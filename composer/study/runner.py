"""One trial: sample a config, build or reuse its index, retrieve, answer, score in batches, report.

Questions are scored in fixed-order batches and the running objective is reported after each one, so an
Optuna pruner compares trials on the same questions at the same step and can stop a poor trial early.
A configuration already completed in the study is not run again: the trial returns the earlier result.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from composer.data.types import Corpus, Question, QuestionSet, Run
from composer.errors import ComposerError
from composer.evaluation import EvaluationReport, SampleRecord, evaluate_run
from composer.generation import Answerer
from composer.metrics.matching import MatchMode, default_match_mode
from composer.pipeline.config import PipelineConfig
from composer.study.experiment import ObjectiveConfig
from composer.study.objective import Objective
from composer.study.space import SearchSpace
from composer.text import tokenize

if TYPE_CHECKING:
    import optuna

    from composer.pipeline.pipeline import IndexInfo
    from composer.study.tracking import StudyTracker

logger = logging.getLogger(__name__)

DEFAULT_KS = (1, 3, 5, 10)


@dataclass(frozen=True)
class QuestionTiming:
    """Where one question's time went; retrieve, rerank and judge are amortized over its batch."""

    batch_start_ns: int
    batch_size: int
    retrieve_s: float
    rerank_s: float
    generate_s: float
    judge_s: float


@dataclass
class Scored:
    """A pipeline's scores on a question set, with what a trace needs to show each question."""

    report: EvaluationReport
    run: Run
    timings: dict[str, QuestionTiming]
    answerer: str
    steps: list[float] = field(default_factory=list)

    def secondary_metrics(self) -> dict[str, float]:
        """Cost metrics: mean latency per question and mean context size (tokens of all k hits)."""
        n = max(len(self.timings), 1)
        latency = sum(t.retrieve_s + t.rerank_s + t.generate_s for t in self.timings.values()) / n
        tokens = sum(len(tokenize(h.text)) for hits in self.run.values() for h in hits if h.text)
        return {"latency_ms": 1000.0 * latency, "context_tokens": tokens / max(len(self.run), 1)}


class RetrievalPipeline(Protocol):
    """What a trial needs of a pipeline (composer.pipeline.pipeline.Pipeline is the real one)."""

    def index(self, corpus: Corpus) -> IndexInfo: ...

    def universe(self) -> Mapping[str, tuple[str, str]]: ...

    def retrieve_timed(self, questions: Sequence[Question]) -> tuple[Run, dict[str, dict[str, float]]]: ...


BatchHook = Callable[[int, EvaluationReport], None]
"""``hook(step, report so far)`` after each batch; raising (optuna.TrialPruned) stops the scoring."""


def score_pipeline(
    pipeline: RetrievalPipeline,
    questions: QuestionSet,
    corpus: Corpus,
    answerer: Answerer,
    *,
    ks: Sequence[int] = DEFAULT_KS,
    batch_size: int = 50,
    match: MatchMode | None = None,
    on_batch: BatchHook | None = None,
) -> Scored:
    """Retrieve, answer and score ``questions`` batch by batch (the pipeline must be indexed).

    Each batch is evaluated once and its records appended, so scoring stays linear in the questions; the
    match mode is fixed for the whole set so every batch is judged alike.
    """
    mode = match or default_match_mode(questions, corpus)
    universe = pipeline.universe()
    meta = {"questions": questions.source, "questions_fingerprint": questions.fingerprint(),
            "corpus": corpus.source}
    items = list(questions)
    run: Run = {}
    timings: dict[str, QuestionTiming] = {}
    samples: list[SampleRecord] = []
    report = EvaluationReport([], ks, mode, meta)
    for step, lo in enumerate(range(0, len(items), batch_size)):
        batch = items[lo : lo + batch_size]
        started = time.time_ns()
        batch_run, latency = pipeline.retrieve_timed(batch)
        answers, generate_s = _answer(answerer, batch, batch_run)
        t0 = time.perf_counter()
        batch_report = evaluate_run(QuestionSet(batch, questions.source), batch_run, ks=ks, match=mode,
                                    corpus=corpus, universe=universe, answers=answers)
        judge_s = (time.perf_counter() - t0) / len(batch)
        for q, record in zip(batch, batch_report.samples, strict=True):
            lat = latency.get(q.id, {})
            record.latency = {"retrieve": lat.get("retrieve", 0.0), "rerank": lat.get("rerank", 0.0),
                              "generate": generate_s[q.id], "judge": judge_s}
            timings[q.id] = QuestionTiming(started, len(batch), lat.get("retrieve", 0.0),
                                           lat.get("rerank", 0.0), generate_s[q.id], judge_s)
        run.update(batch_run)
        samples.extend(batch_report.samples)
        report = EvaluationReport(samples, batch_report.ks, mode, meta)
        if on_batch is not None:
            on_batch(step, report)
    return Scored(report, run, timings, answerer.name)


def _answer(
    answerer: Answerer, batch: Sequence[Question], run: Run
) -> tuple[dict[str, str], dict[str, float]]:
    answers: dict[str, str] = {}
    seconds: dict[str, float] = {}
    for q in batch:
        t0 = time.perf_counter()
        answers[q.id] = answerer.answer(q, run.get(q.id, []))
        seconds[q.id] = time.perf_counter() - t0
    return answers, seconds


def config_hash(config: PipelineConfig) -> str:
    """Identity of a configuration: equal hashes mean equal pipelines, whatever parameters produced them."""
    return hashlib.sha256(json.dumps(config.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


def flat_metrics(scored: Scored, objective: Objective) -> dict[str, float]:
    """Every metric mean, the composite and the cost metrics, keyed as reports key them (``recall@10``)."""
    out = {name: st.mean for name, st in scored.report.stats().items()}
    out.update(scored.secondary_metrics())
    for stage, stats in scored.report.latency_ms().items():
        out[f"latency_{stage}_ms"] = stats["mean"]
    out["composite"] = objective.composite(out)
    return out


@dataclass
class StudyData:
    """What every trial of a study shares: the data, the space, the objective, where indexes live."""

    corpus: Corpus
    questions: QuestionSet
    space: SearchSpace
    objective: ObjectiveConfig
    workdir: Path
    answerer: Answerer
    qdrant: str | None = None
    api_key: str | None = None
    batch_size: int = 50

    @property
    def ks(self) -> tuple[int, ...]:
        return tuple(sorted({*DEFAULT_KS, self.objective.k}))

    def pipeline(self, config: PipelineConfig) -> RetrievalPipeline:
        from composer.pipeline.pipeline import Pipeline

        return Pipeline.from_config(config, workdir=self.workdir, qdrant=self.qdrant, api_key=self.api_key)


class TrialRunner:
    """The Optuna objective: ``study.optimize(TrialRunner(data, tracker), ...)``."""

    def __init__(self, data: StudyData, tracker: StudyTracker | None = None) -> None:
        self.data = data
        self.tracker = tracker
        self.objective: Objective | None = None

    def __call__(self, trial: optuna.Trial) -> float | tuple[float, ...]:
        import optuna

        started = datetime.now(timezone.utc)
        try:
            config = self.data.space.sample(trial)
        except ComposerError as exc:  # an invalid combination of sampled values
            trial.set_user_attr("error", str(exc))
            if self.tracker is not None:
                self.tracker.log_failed_trial(trial.number, trial.params, str(exc))
            raise
        digest = config_hash(config)
        trial.set_user_attr("config", config.to_dict())
        trial.set_user_attr("config_hash", digest)
        earlier = _completed_with(trial.study, digest)
        if earlier is not None:
            return self._repeat(trial, config, earlier, started)

        log = TrialLog(trial.number, config, started)
        steps: list[float] = []
        try:
            pipeline = self.data.pipeline(config)
            info = pipeline.index(self.data.corpus)
            for name in ("key", "n_chunks", "reused", "embeddings_computed", "embeddings_reused", "seconds"):
                trial.set_user_attr(f"index_{name}", getattr(info, name))
            log.tags["composer.index_key"] = info.key
            scored = score_pipeline(
                pipeline, self.data.questions, self.data.corpus, self.data.answerer, ks=self.data.ks,
                batch_size=self.data.batch_size,
                on_batch=lambda step, report: self._step(trial, step, report, steps),
            )
        except optuna.TrialPruned:
            log.state, log.steps = "PRUNED", steps
            log.metrics = trial.user_attrs.get("metrics", {})
            self._log(log)
            raise
        except Exception as exc:
            log.state = "FAIL"
            log.tags["composer.error"] = f"{type(exc).__name__}: {exc}"[:4000]
            trial.set_user_attr("error", log.tags["composer.error"])
            self._log(log)
            raise
        scored.steps = steps
        objective = self._objective(scored.report)
        metrics = flat_metrics(scored, objective)
        trial.set_user_attr("metrics", metrics)
        log.state, log.metrics, log.steps, log.scored = "COMPLETE", metrics, steps, scored
        self._log(log)
        values = objective.values(metrics)
        return values[0] if len(values) == 1 else values

    def _objective(self, report: EvaluationReport) -> Objective:
        """Resolved on the first batch scored: which metrics exist depends on the data, not the trial."""
        if self.objective is None:
            self.objective = Objective.resolve(self.data.objective, report.stats().keys())
        return self.objective

    def _step(self, trial: optuna.Trial, step: int, report: EvaluationReport, steps: list[float]) -> None:
        import optuna

        objective = self._objective(report)
        value = objective.composite({name: st.mean for name, st in report.stats().items()})
        steps.append(value)
        if objective.secondary:
            return  # Optuna prunes single-objective studies only
        trial.report(value, step)
        if trial.should_prune():
            trial.set_user_attr("metrics", {"composite": value})
            trial.set_user_attr("pruned_at", {"step": step, "questions": len(report.samples)})
            raise optuna.TrialPruned(f"pruned after {len(report.samples)} questions (composite {value:.4f})")

    def _repeat(self, trial: optuna.Trial, config: PipelineConfig, earlier: optuna.trial.FrozenTrial,
                started: datetime) -> float | tuple[float, ...]:
        """Answer a repeated configuration with the result already in the study."""
        trial.set_user_attr("duplicate_of", earlier.number)
        metrics = dict(earlier.user_attrs.get("metrics", {}))
        trial.set_user_attr("metrics", metrics)
        for name, value in earlier.user_attrs.items():
            if name.startswith("index_"):
                trial.set_user_attr(name, value)
        log = TrialLog(trial.number, config, started, state="COMPLETE", metrics=metrics)
        log.tags["composer.duplicate_of"] = str(earlier.number)
        log.tags["composer.index_key"] = str(earlier.user_attrs.get("index_key", ""))
        self._log(log)
        assert earlier.values is not None
        return earlier.values[0] if len(earlier.values) == 1 else tuple(earlier.values)

    def _log(self, log: TrialLog) -> None:
        if self.tracker is not None:
            self.tracker.log_trial(log)


@dataclass
class TrialLog:
    """What the tracker records for one trial, whatever its end."""

    number: int
    config: PipelineConfig
    started: datetime
    state: str = "RUNNING"
    metrics: Mapping[str, float] = field(default_factory=dict)
    steps: list[float] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    scored: Scored | None = None



def _completed_with(study: optuna.Study, digest: str) -> optuna.trial.FrozenTrial | None:
    from optuna.trial import TrialState

    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.user_attrs.get("config_hash") == digest and "metrics" in t.user_attrs:
            return t
    return None
