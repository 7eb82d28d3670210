"""One trial: sample a config, index (or reuse), rank, answer and judge what the objective needs, score,
report to the pruner, and record it on the trial; its report waits for the MLflow writer.

Questions are scored in fixed-order batches and the running objective is reported after each one, so an
Optuna pruner compares trials on the same questions at the same step and can stop a poor trial early.
A configuration already completed in the study is not run again: the trial returns the earlier result.
With an LLM, every trial's calls (expansion, reranking, generation, judging) are counted: tokens, cost,
cached calls and failures by kind go to its metrics and error_rates.json. A failed sample never fails a
trial; more than the judge settings' ``max_failure_share`` does, with the reason, and the study goes on.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer.data.types import Corpus, QuestionSet
from composer.errors import ComposerError
from composer.evaluation.report import EvaluationReport
from composer.evaluation.scoring import (
    DEFAULT_KS,
    BatchHook,
    Judging,
    RankingPipeline,
    Scored,
    StageHook,
    make_judging,
    score_pipeline,
    usage_metrics,
)
from composer.evaluation.system import NotASystem
from composer.files import disk_full_error
from composer.judges import JudgeConfig
from composer.llm import LLMConfig, Usage, track_usage
from composer.objective import NothingToScore, Objective, ObjectiveConfig, available_metrics, needs_answers
from composer.pipeline.config import PipelineConfig
from composer.protocols import SystemFactory
from composer.record import FailureKind, TrialRecord
from composer.redact import scrub_url
from composer.study import _optuna, budget
from composer.study._optimize import target_reached
from composer.study._workers import twin_retry
from composer.study.experiment import StopConfig
from composer.study.leaderboard import WEIGHTS_ATTR
from composer.study.space import SearchSpace
from composer.tracking.trial import TrialReport

if TYPE_CHECKING:
    import optuna

    from composer.evaluation.system import SystemPipeline
    from composer.pipeline.pipeline import Pipeline

logger = logging.getLogger(__name__)

USAGE_METRICS = frozenset(Usage().to_dict())
ANSWERS_ATTR = "system_answers"
"""Study user attribute: whether the study's (user's) systems answer, as its first built system showed."""
TRACED = 25
"""Questions whose generation details a TrialReport carries for MLflow traces, at most."""


Configured = PipelineConfig | dict[str, Any]
"""What a trial's parameters make: a pipeline config, or the settings a user's factory is called with."""


def config_dict(config: Configured) -> dict[str, Any]:
    return config.to_dict() if isinstance(config, PipelineConfig) else config


def config_hash(config: Configured) -> str:
    """Identity of a configuration: equal hashes mean equal pipelines, whatever parameters produced them."""
    text = json.dumps(config_dict(config), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def flat_metrics(scored: Scored, objective: Objective) -> dict[str, float]:
    """Every metric mean, the composite and the cost metrics, keyed as reports key them (``recall@10``)."""
    out: dict[str, float] = dict(scored.report.means())
    out.update(scored.secondary_metrics())
    out.update(scored.llm_metrics())
    for stage, stats in scored.report.latency_ms().items():
        out[f"latency_{stage}_ms"] = stats["mean"]
    out["composite"] = objective.composite(out)
    return out


@dataclass
class StudyData:
    """What every trial of a study shares: the data, the space, the objective, where indexes live, and
    the LLM settings: ``llm`` (the experiment's ``llm:`` block: the default generator and how to call
    it) and ``judge`` (one judge for every trial, by default ``llm.model``)."""

    corpus: Corpus
    questions: QuestionSet
    space: SearchSpace
    objective_config: ObjectiveConfig
    workdir: Path
    qdrant: str | None = None
    batch_size: int = 50
    llm: LLMConfig | None = None
    judge: JudgeConfig | None = None
    system: SystemFactory | None = None
    """A user's factory: trials then build ``system(settings)`` from the (free) space, not a Pipeline."""
    concurrency: int = 8
    """Questions a user's system is asked at once."""

    def __post_init__(self) -> None:
        if (self.system is not None) != self.space.free:
            raise ComposerError("a factory's study needs a free search space, a pipeline's a pipeline one")
        if self.llm is not None and self.system is None:  # the space's own generation settings win
            self.space = self.space.under({"generation": generation_defaults(self.llm)})
        self.space.check_conditions()

    @property
    def ks(self) -> tuple[int, ...]:
        return tuple(sorted({*DEFAULT_KS, self.objective_config.k}))

    def configure(self, params: Mapping[str, Any]) -> tuple[Configured, str]:
        """A trial's parameters as what it runs: a pipeline config (with what the ``llm:`` block gives its
        generator written out, so its export answers alike), or its factory's settings; and its identity
        (``config_hash``) taken before the ``llm:`` block's settings are written in, as trials recorded
        before they were had it: a resumed study still finds its earlier trials and re-scores its winner."""
        if self.system is not None:
            settings = self.space.settings(params)
            return settings, config_hash(settings)
        built = self.space.build(params)
        return built.resolved(self.llm), config_hash(built)

    def pipeline(self, config: Configured) -> Pipeline | SystemPipeline:
        """What produces the trial's batches: Composer's pipeline, or the user's system."""
        if isinstance(config, PipelineConfig):
            from composer.pipeline.pipeline import Pipeline

            return Pipeline.from_config(config, workdir=self.workdir, qdrant=self.qdrant, llm=self.llm)
        from composer.evaluation.system import SystemPipeline

        assert self.system is not None
        return SystemPipeline(self.system(copy.deepcopy(config)), corpus=self.corpus,
                              concurrency=self.concurrency)

    def rebuild(self, params: Mapping[str, Any], digest: str) -> Pipeline | SystemPipeline:
        """A finished trial's pipeline (or system) from its parameters, indexed: the stored config has its
        credentials masked, so the held-out re-score rebuilds it, and checks it is the one that ran."""
        config, identity = self.configure(params)
        if identity != digest:
            raise ComposerError("the search space or the llm: block changed since the trial ran")
        pipeline = self.pipeline(config)
        pipeline.index(self.corpus)
        return pipeline

    @cached_property
    def judging(self) -> Judging | None:
        """The study's one judge, built once, also judging the judge metrics the objective weighs; None
        without any LLM (deterministic metrics only)."""
        judge = self.judge if self.judge is not None else (JudgeConfig() if self.llm is not None else None)
        if judge is None:
            return None
        return make_judging(judge, self.llm, self.workdir, also=list(self.objective_config.metrics))

    @cached_property
    def objective(self) -> Objective:
        """The objective over the metrics this study can score: they depend on the data and the judge,
        never on a trial, so it is resolved (and its substitutions warned about) once."""
        judged = self.judging.settings.metrics if self.judging is not None else ()
        return Objective.resolve(self.objective_config, available_metrics(self.questions, self.ks, judged))

    def settle(self, study: optuna.Study, can_answer: bool | None = None) -> None:
        """Fit the objective to what the study's systems produce, once per study so that every trial's
        composite weighs the same metrics: a user's system without an answer method scores no answer
        metric, which then leaves the composite (``Objective.without_answers``) instead of counting 0.
        ``can_answer``: what a trial's system showed; the study's record of its first one wins. The
        weights in force are kept on the study, for its tables to show the metrics that carry them."""
        attrs = study.user_attrs
        if self.system is not None:
            answers = attrs.get(ANSWERS_ATTR)
            if answers is None and can_answer is not None:
                study.set_user_attr(ANSWERS_ATTR, answers := can_answer)
            if answers is False:
                self.objective = self.objective.without_answers()
        weights = dict(self.objective.weights)
        if attrs.get(WEIGHTS_ATTR) != weights:
            study.set_user_attr(WEIGHTS_ATTR, weights)

    def llm_endpoints(self) -> list[LLMConfig]:
        """Every LLM a trial may call: each generator its space can pick, when trials answer, expand queries
        or rerank with it, and the judge."""
        from composer.generation.config import GenerationConfig

        if self.system is not None:  # a user's system calls its own LLMs: only the judge is ours
            return [self.judging.client.config] if self.judging is not None else []
        possible = self.space.possible
        generates = self.answers or "llm" in possible("rerank.method") or any(
            method != "none" for method in possible("query_expansion.method")
        )
        base = self.space.base()["generation"]
        sections = [base] if generates else []
        for dim in self.space.dimensions if generates else ():
            if dim.key == "generation" and dim.bundles:
                sections += [{**base, **bundle} for bundle in dim.bundles.values()]
            elif dim.key == "generation.model":
                sections += [{**base, "model": model} for model in dim.choices]
        out = [
            config
            for section in sections
            if (config := GenerationConfig.model_validate(section).llm_config(self.llm)) is not None
        ]
        if self.judging is not None:
            out.append(self.judging.client.config)
        return out

    @property
    def answers(self) -> bool:
        """Whether trials answer the questions: only when a judge or a weighted metric reads answers."""
        return self.judging is not None or needs_answers(self.objective)

    def score(
        self,
        pipeline: RankingPipeline,
        questions: QuestionSet,
        *,
        batch_size: int | None = None,
        on_batch: BatchHook | None = None,
        on_stage: StageHook | None = None,
        on_failure: Callable[[Scored], None] | None = None,
    ) -> Scored:
        """Score an indexed pipeline on ``questions`` (the selection, or the held-out set) as trials do;
        ``on_failure`` gets the scores so far of a scoring that fails."""
        return score_pipeline(
            pipeline,
            questions,
            self.corpus,
            judging=self.judging,
            ks=self.ks,
            batch_size=batch_size or self.batch_size,
            answers=self.answers,
            on_batch=on_batch,
            on_stage=on_stage,
            on_failure=on_failure,
        )


def generation_defaults(llm: LLMConfig) -> dict[str, Any]:
    """The ``llm:`` block as pipeline defaults: the generator a trial uses unless its space picks one."""
    out: dict[str, Any] = {"model": llm.model, "temperature": llm.temperature}
    out.update({k: v for k in ("api_base", "api_key_env") if (v := getattr(llm, k)) is not None})
    return out


class SurplusTrial(ComposerError):
    """A trial started after the study's target was reached (by other workers): failed unscored."""


class InvalidConfiguration(ComposerError):
    """A trial's sampled values make no valid configuration: failed unscored, as Optuna's own FAIL."""


class TrialRunner:
    """The study's one Optuna objective: ``study.optimize(TrialRunner(data, target=n), ...)``.

    It runs a trial only while the study's first ``target`` slot-holding trials are not all taken (in
    trial-number order; every trial without a target), and once per queued retry: two workers checking the
    count at the same instant may both start one more trial; numbers are unique, so every worker agrees
    which is surplus: it stops its worker and fails unscored (as does the later of two retries of one lost
    trial). Every failure is recorded here, on the trial's record, so it counts toward the stop rules and is
    never taken for a trial whose process died. What a trial produced for MLflow waits in ``reports`` until
    Optuna has told its end (``pop_report``). ``on_stage`` shows a running trial's progress, ``on_start``
    gets each trial's number and the usage counting its LLM calls as they happen."""

    def __init__(
        self,
        data: StudyData,
        *,
        target: int | None = None,
        on_stage: StageHook | None = None,
        on_start: Callable[[int, Usage], None] | None = None,
        stop: StopConfig | None = None,
    ) -> None:
        self.data = data
        self.on_start = on_start
        self.budget = stop if stop is not None and budget.limited(stop) else None
        """The study's LLM budget, checked before each trial and after each batch (None: no limit)."""
        self.target = target
        self.on_stage = on_stage
        self.reports: dict[int, TrialReport] = {}
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
            try:
                self._claim_slot(trial)
                return self.evaluate(trial, usage)
            except optuna.TrialPruned:
                raise
            except Exception as exc:
                self._failed(trial, exc, usage)
                raise

    def pop_report(self, number: int) -> TrialReport:
        """What trial ``number`` produced for its MLflow run (nothing, for a trial of another process)."""
        return self.reports.pop(number, TrialReport())

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
        if usage.calls and trial.number not in self.reports:  # else the samples it scored (``evaluate``)
            self.reports[trial.number] = TrialReport(error_rates=usage.error_rates())

    def evaluate(self, trial: optuna.Trial, usage: Usage) -> float | tuple[float, ...]:
        """Run the trial's configuration (or answer a repeat from its earlier trial) and record it."""
        import optuna

        try:
            config, digest = self.data.configure(self.data.space.params(trial))
        except ComposerError as exc:
            raise InvalidConfiguration(str(exc)) from exc
        record = TrialRecord(config_dict(config), digest)
        earlier = completed_with(_optuna.trials_at_start(trial.study, trial.number), record.config_hash)
        if earlier is not None:
            return self._repeat(trial, record, earlier)
        record.save(trial)  # the config is on the trial at once: a crash leaves it for the retry
        steps: list[float] = []
        last: list[EvaluationReport] = []
        pipeline = self.data.pipeline(config)
        if self.data.system is not None:
            self.data.settle(trial.study, pipeline.can_answer)
        index = pipeline.index(self.data.corpus)  # None for a user's system: it keeps its own index
        record = record.updated(index=index)
        judge = self.data.judging.model if self.data.judging is not None else None
        kept: list[Scored] = []
        try:
            scored = self.data.score(
                pipeline,
                self.data.questions,
                on_stage=self.on_stage,
                on_batch=lambda step, report: self._step(trial, step, report, steps, last, usage),
                on_failure=kept.append,
            )
        except optuna.TrialPruned:
            metrics = {"composite_at_prune": steps[-1], "pruned_at_questions": float(len(last[-1]))}
            record.updated(metrics=metrics, llm_usage=usage_metrics(usage)).save(trial)
            self.reports[trial.number] = TrialReport(last[-1], judge=judge)
            raise
        except Exception:
            record.save(trial)  # the index it searched joins the failure's record
            if kept:  # what it answered and judged before it failed: its run's samples and traces
                self.reports[trial.number] = self._report(kept[0], config)
            raise
        metrics = flat_metrics(scored, self.data.objective)
        record.updated(metrics=metrics, llm_usage=usage_metrics(usage),
                       seconds=time_split(record, scored.seconds)).save(trial)
        self.reports[trial.number] = self._report(scored, config)
        values = self.data.objective.values(metrics)
        return values[0] if len(values) == 1 else values

    @staticmethod
    def _report(scored: Scored, config: Configured) -> TrialReport:
        """What a trial's run shows of its scores: its report, and how its first answers were made."""
        generation = generation_details(scored, config, TRACED)
        return TrialReport(scored.report, scored.answerer, scored.judge, generation)

    def _step(
        self,
        trial: optuna.Trial,
        step: int,
        report: EvaluationReport,
        steps: list[float],
        last: list[EvaluationReport],
        usage: Usage,
    ) -> None:
        import optuna

        if self.budget is not None:
            budget.check(self.budget, trial, usage)
        objective = self.data.objective
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
