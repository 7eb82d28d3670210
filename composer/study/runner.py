"""One trial: sample a config, build or reuse its index, retrieve, answer, judge, score in batches, report.

Questions are scored in fixed-order batches and the running objective is reported after each one, so an
Optuna pruner compares trials on the same questions at the same step and can stop a poor trial early.
A configuration already completed in the study is not run again: the trial returns the earlier result.
With an LLM, every trial's calls (expansion, reranking, generation, judging) are counted: tokens, cost,
cached calls and failures by kind go to its metrics and error_rates.json. A failed sample never fails a
trial; more than the judge settings' ``max_failure_share`` does, with the reason, and the study goes on.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer.data.types import Corpus, QuestionSet
from composer.errors import ComposerError
from composer.evaluation import EvaluationReport
from composer.evaluation.pipeline import (
    DEFAULT_KS,
    BatchHook,
    Judging,
    RetrievalPipeline,
    Scored,
    make_judging,
    score_pipeline,
    usage_metrics,
)
from composer.judges import JudgeConfig
from composer.llm import LLMConfig, Usage, track_usage
from composer.pipeline.config import PipelineConfig
from composer.study.experiment import ObjectiveConfig
from composer.study.objective import Objective
from composer.study.space import SearchSpace

if TYPE_CHECKING:
    import optuna

    from composer.study.tracking import StudyTracker

logger = logging.getLogger(__name__)

__all__ = [
    "LLM_USAGE_ATTR",
    "StudyData",
    "TrialLog",
    "TrialRunner",
    "config_hash",
    "flat_metrics",
    "pruned_metrics",
]

USAGE_METRICS = frozenset(Usage().to_dict())
LLM_USAGE_ATTR = "llm_usage"
"""Trial user attribute: the trial's own LLM spending (``usage_metrics``), summed into the study's."""


def config_hash(config: PipelineConfig) -> str:
    """Identity of a configuration: equal hashes mean equal pipelines, whatever parameters produced them."""
    return hashlib.sha256(json.dumps(config.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


def flat_metrics(scored: Scored, objective: Objective) -> dict[str, float]:
    """Every metric mean, the composite and the cost metrics, keyed as reports key them (``recall@10``)."""
    out: dict[str, float] = dict(scored.report.means())
    out.update(scored.secondary_metrics())
    out.update(scored.llm_metrics())
    for stage, stats in scored.report.latency_ms().items():
        out[f"latency_{stage}_ms"] = stats["mean"]
    out["composite"] = objective.composite(out)
    return out


def pruned_metrics(steps: list[float], pruned_at: Mapping[str, int]) -> dict[str, float]:
    """A pruned trial's scores, named apart from a complete trial's ``composite``: a running composite
    over the first questions is no result to rank beside the composite over all of them."""
    return {"composite_at_prune": steps[-1], "pruned_at_step": float(pruned_at["step"]),
            "pruned_at_questions": float(pruned_at["questions"])}


@dataclass
class StudyData:
    """What every trial of a study shares: the data, the space, the objective, where indexes live, and
    the LLM settings: ``llm`` (the experiment's ``llm:`` block: the default generator and how to call
    it) and ``judge`` (one judge for every trial, by default ``llm.model``)."""

    corpus: Corpus
    questions: QuestionSet
    space: SearchSpace
    objective: ObjectiveConfig
    workdir: Path
    qdrant: str | None = None
    batch_size: int = 50
    llm: LLMConfig | None = None
    judge: JudgeConfig | None = None

    def __post_init__(self) -> None:
        if self.llm is not None:  # the space's own generation settings win over the llm: block's
            self.space = self.space.under({"generation": generation_defaults(self.llm)})

    @property
    def ks(self) -> tuple[int, ...]:
        return tuple(sorted({*DEFAULT_KS, self.objective.k}))

    def pipeline(self, config: PipelineConfig) -> RetrievalPipeline:
        from composer.pipeline.pipeline import Pipeline

        return Pipeline.from_config(config, workdir=self.workdir, qdrant=self.qdrant, llm=self.llm)

    @cached_property
    def judging(self) -> Judging | None:
        """The study's one judge, built once, also judging the judge metrics the objective weighs; None
        without any LLM (deterministic metrics only)."""
        judge = self.judge if self.judge is not None else (JudgeConfig() if self.llm is not None else None)
        if judge is None:
            return None
        return make_judging(judge, self.llm, self.workdir, also=list(self.objective.metrics))

    def score(self, pipeline: RetrievalPipeline, questions: QuestionSet, *, batch_size: int | None = None,
              on_batch: BatchHook | None = None) -> Scored:
        """Score an indexed pipeline on ``questions`` (the selection, or the held-out set) as trials do."""
        return score_pipeline(pipeline, questions, self.corpus, judging=self.judging, ks=self.ks,
                              batch_size=batch_size or self.batch_size, on_batch=on_batch)


def generation_defaults(llm: LLMConfig) -> dict[str, Any]:
    """The ``llm:`` block as pipeline defaults: the generator a trial uses unless its space picks one."""
    out: dict[str, Any] = {"model": llm.model, "temperature": llm.temperature}
    out.update({k: v for k in ("api_base", "api_key_env") if (v := getattr(llm, k)) is not None})
    return out


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
        with track_usage() as usage:
            try:
                pipeline = self.data.pipeline(config)
                info = pipeline.index(self.data.corpus)
                for name in ("key", "n_chunks", "reused", "embeddings_computed", "embeddings_reused",
                             "seconds"):
                    trial.set_user_attr(f"index_{name}", getattr(info, name))
                log.tags["composer.index_key"] = info.key
                if self.data.judging is not None:
                    log.tags["composer.judge_model"] = self.data.judging.model
                scored = self.data.score(
                    pipeline, self.data.questions,
                    on_batch=lambda step, report: self._step(trial, step, report, steps),
                )
            except optuna.TrialPruned:
                log.state, log.steps = "PRUNED", steps
                log.metrics = {**pruned_metrics(steps, trial.user_attrs["pruned_at"]), **usage_metrics(usage)}
                self._log(log)
                raise
            except Exception as exc:
                log.state = "FAIL"
                log.tags["composer.error"] = f"{type(exc).__name__}: {exc}"[:4000]
                trial.set_user_attr("error", log.tags["composer.error"])
                log.metrics = usage_metrics(usage)
                if usage.calls:
                    log.error_rates = {**usage.error_rates(), "reason": log.tags["composer.error"]}
                self._log(log)
                raise
            finally:
                if usage.calls:  # whatever the trial's end, for the study's totals (a repeat spends none)
                    trial.set_user_attr(LLM_USAGE_ATTR, usage_metrics(usage))
        objective = self.objective_for(scored.report)
        metrics = flat_metrics(scored, objective)
        trial.set_user_attr("metrics", metrics)
        log.state, log.metrics, log.steps, log.scored = "COMPLETE", metrics, steps, scored
        self._log(log)
        values = objective.values(metrics)
        return values[0] if len(values) == 1 else values

    def objective_for(self, report: EvaluationReport) -> Objective:
        """The study's objective, resolved on the first report scored (a trial's first batch, or a
        held-out re-score when no trial ran here): which metrics exist depends on the data (and the
        judge), not the trial; a judged metric counts as available even if no sample scored it yet."""
        if self.objective is None:
            judged = self.data.judging.settings.metrics if self.data.judging is not None else ()
            self.objective = Objective.resolve(self.data.objective, {*report.means(), *judged})
        return self.objective

    def _step(self, trial: optuna.Trial, step: int, report: EvaluationReport, steps: list[float]) -> None:
        import optuna

        objective = self.objective_for(report)
        value = objective.composite(report.means())
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
        # The repeat's scores are the earlier trial's, its LLM usage nothing: it made no call.
        spent = {k: 0.0 for k in metrics if k in USAGE_METRICS or k.startswith("llm_failed_requests_")}
        log = TrialLog(trial.number, config, started, state="COMPLETE", metrics={**metrics, **spent})
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
    error_rates: Mapping[str, Any] | None = None  # error_rates.json of a trial that failed before a report


def _completed_with(study: optuna.Study, digest: str) -> optuna.trial.FrozenTrial | None:
    from optuna.trial import TrialState

    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.user_attrs.get("config_hash") == digest and "metrics" in t.user_attrs:
            return t
    return None
