"""One trial: sample a config, index (or reuse), rank, answer and judge what the objective needs, score,
report to the pruner, and record it on the trial; what it produced for its MLflow run is spooled under its
number as it ends, for the MLflow writer.

Questions are scored in fixed-order batches and the running objective is reported after each one, so an
Optuna pruner compares trials on the same questions at the same step and can stop a poor trial early.
A configuration already completed in the study is not run again: the trial returns the earlier result.
With an LLM, every trial's calls (expansion, reranking, generation, judging) are counted: tokens, cost,
cached calls and failures by kind go to its metrics and error_rates.json. A failed sample never fails a
trial; more than the judge settings' ``max_failure_share`` does, with the reason, and the study goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from composer.errors import ComposerError
from composer.evaluation.report import EvaluationReport
from composer.evaluation.scoring import Scored, usage_metrics
from composer.evaluation.system import NotASystem
from composer.files import disk_full_error
from composer.index.bm25 import Progress
from composer.llm import Usage, track_usage
from composer.objective import NothingToScore, Objective
from composer.pipeline.config import PipelineConfig
from composer.record import FailureKind, TrialRecord
from composer.redact import scrub_url
from composer.study import _optuna, budget
from composer.study._optimize import target_reached
from composer.study._workers import twin_retry, wait_for_twin
from composer.study.data import Configured, StudyData, config_dict
from composer.study.experiment import StopConfig
from composer.tracking.trial import TrialArtifacts

if TYPE_CHECKING:
    import optuna

    from composer.tracking.spool import Spool

logger = logging.getLogger(__name__)

USAGE_METRICS = frozenset(Usage().to_dict())
TRACED = 25
"""Questions whose generation details a trial's TrialArtifacts carry for MLflow traces, at most."""


def flat_metrics(scored: Scored, objective: Objective) -> dict[str, float]:
    """Every metric mean, the composite and the cost metrics, keyed as reports key them (``recall@10``)."""
    out: dict[str, float] = dict(scored.report.means())
    out.update(scored.secondary_metrics())
    out.update(scored.llm_metrics())
    for stage, stats in scored.report.latency_ms().items():
        out[f"latency_{stage}_ms"] = stats["mean"]
    out["composite"] = objective.composite(out)
    return out


class SurplusTrial(ComposerError):
    """A trial started after the study's target was reached (by other workers): failed unscored."""


class InvalidConfiguration(ComposerError):
    """A trial's sampled values make no valid configuration: failed unscored, as Optuna's own FAIL."""


class TrialRunner:
    """The trial function, what Optuna calls for each trial:
    ``study.optimize(TrialRunner(data, target=n), ...)``.

    It runs a trial only while the study's first ``target`` slot-holding trials are not all taken (in
    trial-number order; every trial without a target), and once per queued retry: two workers checking the
    count at the same instant may both start one more trial; numbers are unique, so every worker agrees
    which is surplus: it stops its worker and fails unscored (as does the later of two retries of one lost
    trial). Every failure is recorded here, on the trial's record, so it counts toward the stop rules and is
    never taken for a trial whose process died. What a trial produced for its MLflow run (``artifacts``) is
    written to the tracker's ``spool`` under the trial's number as the trial ends, before Optuna tells it.
    ``on_stage`` shows a running trial's progress, ``on_start`` gets each trial's number and the usage
    counting its LLM calls as they happen."""

    def __init__(
        self,
        data: StudyData,
        *,
        target: int | None = None,
        on_stage: Progress | None = None,
        on_start: Callable[[int, Usage], None] | None = None,
        stop: StopConfig | None = None,
        spool: Spool | None = None,
    ) -> None:
        self.data = data
        self.spool = spool
        self.on_start = on_start
        self.budget = stop if stop is not None and budget.limited(stop) else None
        """The study's LLM budget, checked before each trial and after each batch (None: no limit)."""
        self.target = target
        self.on_stage = on_stage
        self.artifacts = TrialArtifacts()
        """What the running trial has produced for its MLflow run so far (``_spool``)."""
        self.trial_id: int | None = None
        """The trial it ran last (Optuna's id): the one whose tell fails if another process failed it."""
        self.fatal: ComposerError | None = None
        """An error no trial can get past (a full disk, a factory that returns no system): the study stops
        at the first trial that meets it, and ``optimize`` raises it."""

    def __call__(self, trial: optuna.Trial) -> float | tuple[float, ...]:
        import optuna

        self.trial_id = _optuna.trial_id(trial)
        with track_usage() as usage:
            if self.on_start is not None:
                self.on_start(trial.number, usage)
            self.artifacts = TrialArtifacts()
            try:
                self._claim_slot(trial)
                return self.evaluate(trial, usage)
            except optuna.TrialPruned:
                raise
            except Exception as exc:
                self._failed(trial, exc, usage)
                raise
            finally:
                self._spool(trial.number)

    def _spool(self, number: int) -> None:
        """Spool what the trial produced for its MLflow run under its number (a repeat, or a trial failed
        unscored, nothing): the writer reads it with the frozen trial handed over after Optuna's tell.
        Recording never decides a trial's fate: a write that fails is a warning, and the trial's run is
        then written from its record alone."""
        if self.spool is None:
            return
        try:
            self.spool.put_artifacts(number, self.artifacts)
        except OSError as exc:
            logger.warning("trial %d: its report could not be spooled for MLflow (%s): its run will hold "
                           "its record (state, parameters, metrics) without the report's files", number, exc)

    def _claim_slot(self, trial: optuna.Trial) -> None:
        start = _optuna.trials_at_start(trial.study, trial.number)
        if self.target is not None and target_reached(trial.study, self.target, before=trial.number,
                                                      trials=start):
            trial.study.stop()
            raise SurplusTrial(
                f"surplus: the study's {self.target} trials were already taken by other workers"
            )
        twin = twin_retry(trial.study, trial.number, _optuna.system_attrs(trial))
        if twin is not None:
            raise SurplusTrial(f"surplus: trial #{twin} already runs this retry")
        if self.budget is not None and (reason := budget.reason(self.budget, trial.study)) is not None:
            trial.study.stop()
            raise budget.BudgetSpent(f"{reason}: not started")

    def _failed(self, trial: optuna.Trial, exc: Exception, usage: Usage) -> None:
        """Record why the trial failed, and stop the study on an error no trial can get past."""
        fatal = exc if isinstance(exc, NotASystem | NothingToScore) else disk_full_error(exc)
        if fatal is not None:
            self.fatal = fatal
            trial.study.stop()
        failure: FailureKind = (
            "surplus" if isinstance(exc, SurplusTrial) else "budget" if isinstance(exc, budget.BudgetSpent)
            else "invalid" if isinstance(exc, InvalidConfiguration)
            else "error"
        )
        error = str(exc) if failure != "error" else scrub_url(f"{type(exc).__name__}: {exc}")[:4000]
        record = TrialRecord.of(trial) or TrialRecord(dict(trial.params), "")
        record.updated(error=error, failure=failure, llm_usage=usage_metrics(usage)).save(trial)
        if usage.calls and self.artifacts.report is None:  # else the samples it scored (``evaluate``)
            self.artifacts = TrialArtifacts(error_rates=usage.error_rates())

    def evaluate(self, trial: optuna.Trial, usage: Usage) -> float | tuple[float, ...]:
        """Run the trial's configuration (or answer a repeat from its earlier trial) and record it."""
        import optuna

        try:
            config, digest = self.data.configure(self.data.space.params(trial))
        except ComposerError as exc:
            raise InvalidConfiguration(str(exc)) from exc
        record = TrialRecord(config_dict(config), digest)
        start = _optuna.trials_at_start(trial.study, trial.number)
        earlier = completed_with(start, digest)
        if earlier is None:
            # The config is on the trial at once: a crash leaves it for the retry, and a worker that drew
            # it in the same instant finds it and waits for this trial's result.
            record.save(trial)
            if wait_for_twin(trial.study, trial.number, digest, start):
                earlier = completed_with(_optuna.all_trials(trial.study), digest)
        if earlier is not None:
            return self._repeat(trial, record, earlier)
        steps: list[float] = []
        last: list[EvaluationReport] = []
        pipeline = self.data.pipeline(config)
        data = self.data if self.data.system is None else self.data.settle(trial.study, pipeline.can_answer)
        index = pipeline.index(self.data.corpus)  # None for a user's system: it keeps its own index
        record = record.updated(index=index)
        judge_model = self.data.judging.model if self.data.judging is not None else None
        kept: list[Scored] = []
        try:
            scored = data.score(
                pipeline,
                self.data.questions,
                on_stage=self.on_stage,
                on_batch=lambda step, report: self._step(trial, step, report, data.objective, steps, last,
                                                         usage),
                on_failure=kept.append,
            )
        except optuna.TrialPruned:
            metrics = {"composite_at_prune": steps[-1], "pruned_at_questions": float(len(last[-1]))}
            record.updated(metrics=metrics, llm_usage=usage_metrics(usage)).save(trial)
            self.artifacts = TrialArtifacts(last[-1], judge_model=judge_model)
            raise
        except Exception:
            record.save(trial)  # the index it searched joins the failure's record
            if kept:  # what it answered and judged before it failed: its run's samples and traces
                self.artifacts = self._artifacts(kept[0], config)
            raise
        metrics = flat_metrics(scored, data.objective)
        record.updated(metrics=metrics, llm_usage=usage_metrics(usage),
                       seconds=time_split(record, scored.seconds)).save(trial)
        self.artifacts = self._artifacts(scored, config)
        values = data.objective.values(metrics)
        return values[0] if len(values) == 1 else values

    @staticmethod
    def _artifacts(scored: Scored, config: Configured) -> TrialArtifacts:
        """What a trial's run shows of its scores: its report, and how its first answers were made."""
        generation = generation_details(scored, config, TRACED)
        return TrialArtifacts(scored.report, scored.answerer, scored.judge_model, generation)

    def _step(
        self,
        trial: optuna.Trial,
        step: int,
        report: EvaluationReport,
        objective: Objective,
        steps: list[float],
        last: list[EvaluationReport],
        usage: Usage,
    ) -> None:
        import optuna

        if self.budget is not None:
            budget.check(self.budget, trial, usage)
        value = objective.composite(report.means_of(objective.weights))
        steps.append(value)
        last[:] = [report]
        if objective.secondary or isinstance(trial.study.pruner, optuna.pruners.NopPruner):
            return  # Optuna prunes single-objective studies only; without a pruner, nothing to report to
        trial.report(value, step)
        if trial.should_prune():
            raise optuna.TrialPruned(f"pruned after {len(report)} questions (composite {value:.4f})")

    def _repeat(
        self, trial: optuna.Trial, record: TrialRecord, earlier: optuna.trial.FrozenTrial
    ) -> float | tuple[float, ...]:
        """Answer a repeated configuration with the result already in the study: its scores are the earlier
        trial's, its LLM usage nothing (it made no call)."""
        first = TrialRecord.of(earlier)
        assert first is not None and earlier.values is not None
        spent = {k: 0.0 for k in first.metrics if k in USAGE_METRICS or k.startswith("llm_failed_requests_")}
        record.updated(duplicate_of=earlier.number, metrics={**first.metrics, **spent},
                       index=first.index).save(trial)
        return earlier.values[0] if len(earlier.values) == 1 else tuple(earlier.values)


def time_split(record: TrialRecord, seconds: Mapping[str, float]) -> dict[str, float]:
    """Where a trial's time went: the index, its searches, fusion and reranking (the rest of ranking),
    answers, judges, metrics and the pruner's steps."""
    out = {"index": record.index.seconds if record.index is not None else 0.0}
    out.update(seconds)
    out["fusion"] = max(out.pop("rank", 0.0) - out.get("search", 0.0), 0.0)
    return {stage: round(value, 6) for stage, value in out.items()}


def completed_with(
    trials: Sequence[optuna.trial.FrozenTrial], digest: str
) -> optuna.trial.FrozenTrial | None:
    """The first complete trial of configuration ``digest`` among ``trials``, if any."""
    from optuna.trial import TrialState

    for t in trials:
        if t.state == TrialState.COMPLETE:
            record = TrialRecord.of(t)
            if record is not None and record.config_hash == digest and record.composite is not None:
                return t
    return None


def generation_details(scored: Scored, config: Configured, limit: int) -> dict[str, dict[str, Any]]:
    """How the first ``limit`` questions' answers were generated: what their MLflow traces show."""
    out: dict[str, dict[str, Any]] = {}
    gen = config.generation if isinstance(config, PipelineConfig) else None
    for qid in list(scored.report.table.question_ids)[:limit]:
        answer = scored.answers.get(qid)
        result = answer.result if answer is not None else None
        details: dict[str, Any] = {"answerer": scored.answerer}
        if result is not None and gen is not None:
            details.update(
                model=gen.model,
                template=gen.template,
                temperature=gen.temperature,
                prompt_tokens=result.prompt_tokens,
                completion_tokens=result.completion_tokens,
                cached=result.cached,
                attempts=result.attempts,
            )
            if result.error_kind is not None:
                details["error"] = f"{result.error_kind}: {result.error}"
        out[qid] = details
    return out
