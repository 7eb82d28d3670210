"""Run a study: open (or resume) the Optuna study, optimize with a live view, re-score the winner, report.

Resuming is the default: the study lives in an RDB storage (SQLite in the workdir unless told otherwise)
and is loaded if it exists; running the same command again only runs what is missing. The parts live in
private modules, as Optuna keeps its own: ``_storage`` (opening the storage), ``_sampling`` (samplers,
the conditional grid, pruners) and ``_optimize`` (slots, repeats, surplus and lost trials); ``finish``
re-scores the winner and writes the summary, ``plots`` draws the charts; trials run in ``runner`` (over
``data``, what they share) and are recorded by the MLflow writer
(``writer``, ``tracking``).
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer.data.types import QuestionSet
from composer.errors import ConfigError, option
from composer.llm.spend import Spend
from composer.protocols import SystemFactory
from composer.record import TrialRecord
from composer.redact import scrub_url
from composer.study import _optimize, budget, finish, prompt_stage, staged
from composer.study._storage import load_study, open_study
from composer.study.data import StudyData
from composer.study.experiment import ExperimentConfig
from composer.study.inputs import check_same_data, load_inputs, study_provenance
from composer.study.leaderboard import leaderboard, ranked_trials, report_console
from composer.study.plots import plots
from composer.study.runner import TrialRunner
from composer.study.space import SearchSpace
from composer.summary import HeldOut, StudySummary

if TYPE_CHECKING:
    from types import FrameType

    import optuna
    import pandas as pd
    from rich.console import Console

    from composer.cost.estimate import Estimate
    from composer.study.registry import Registered
    from composer.tracking.writer import StudyTracker

__all__ = ["StudyResult", "TrialLoop", "estimate_study", "load_study", "run_study", "run_worker"]

TrialLoop = Callable[["optuna.Study", ExperimentConfig, StudyData, "StudyTracker", "Console", "int | None",
                      "QuestionSet | None"], None]
"""What runs a study's trials, as ``_run_trials`` does here (Ray workers: ``composer.cluster``)."""

@dataclass
class StudyResult:
    """A finished (or continued) study: where it lives, its winner, the Optuna study itself, its report.

    Attributes:
        name: The study's name.
        storage: Its Optuna storage URL.
        tracking_uri: Its MLflow tracking URI.
        parent_run_id: The MLflow run its trials are nested under.
        summary: Trials by state, the winner, the held-out re-score and its verdict.
        leaderboard: The trials as a table.
        study: The Optuna study.
        best_value: The winner's objective value (None: no trial completed).
        best_params: The winner's sampled parameters.
        best_config: The winner's pipeline config, or for a factory the settings it was called with.

    Example:
        ::

            result = composer.optimize("experiments/arabic-demo.yaml", n_trials=5)
            print(result.best_value, result.best_params, result.held_out)
    """

    name: str
    storage: str
    tracking_uri: str
    parent_run_id: str
    summary: StudySummary
    """Trials by state, the winner, the held-out re-score and its verdict."""
    leaderboard: pd.DataFrame
    study: optuna.Study
    best_value: float | None = None
    best_params: dict[str, Any] = field(default_factory=dict)
    best_config: dict[str, Any] | None = None
    """The winner's pipeline config, or for a factory the settings it was called with."""
    workdir: Path | None = None
    """The study's work dir: its trials' saved indexes (what ``register`` puts in the model)."""
    qdrant: str | None = None
    """The Qdrant server its indexes live on (None: Qdrant Edge in the work dir)."""

    @property
    def held_out(self) -> HeldOut | None:
        """The winner's re-score on the held-out split (its ``difference`` to the runner-up, with its CI),
        or None without a split."""
        return self.summary.held_out

    def register(self, name: str, promote: bool = False) -> Registered:
        """Register the winner in MLflow's Model Registry as ``name`` (alias ``challenger``; ``champion``
        too when ``promote``): a pyfunc model that carries its index, so
        ``mlflow.pyfunc.load_model(f"models:/{name}@champion")`` answers anywhere, without the corpus."""
        from composer.study.export import best_trial
        from composer.study.registry import Where, register_winner

        if self.workdir is None:
            raise ConfigError("this study result does not say its work dir: register with `composer export "
                              "--register`", field="workdir")
        where = Where(self.storage, self.tracking_uri, self.workdir, self.qdrant)
        return register_winner(self.study, best_trial(self.study), where, name, promote=promote)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP (``kill``, ``timeout``, a scheduler, a closed terminal) stop a study as Ctrl-C
    does, its MLflow parent run ended KILLED: by default they end the process at once, the run left
    RUNNING. Each goes to what handles SIGINT as it lands (the optimize loop's ``CtrlC``); a handler
    that is not the default (a host application's) is left alone."""

    def as_ctrl_c(signum: int, frame: FrameType | None) -> None:
        handler = signal.getsignal(signal.SIGINT)
        if not callable(handler):  # SIGINT ignored (a job started in the background): stop all the same
            raise KeyboardInterrupt
        handler(signum, frame)

    main = threading.current_thread() is threading.main_thread()
    taken = [sig for sig in (signal.SIGTERM, signal.SIGHUP)
             if main and signal.getsignal(sig) == signal.SIG_DFL]
    for sig in taken:
        signal.signal(sig, as_ctrl_c)
    try:
        yield
    finally:
        for sig in taken:
            signal.signal(sig, signal.SIG_DFL)


@stop_on_signals()
def run_study(
    exp: ExperimentConfig,
    *,
    n_trials: int | None = None,
    study_name: str | None = None,
    console: Console | None = None,
    strict: bool = False,
    system: SystemFactory | None = None,
    concurrency: int = 8,
    trials: TrialLoop | None = None,
) -> StudyResult:
    """Optimize (or continue) the experiment's study and report it; see the module docstring. ``strict``:
    relevant ids missing from the corpus are an error, not a warning. ``system``: the factory each trial
    builds its system with (default: the one the experiment's ``system:`` names), asked ``concurrency``
    questions at once. ``trials``: what runs the trials in place of this process's loop (Ray workers,
    ``composer.cluster``), this process doing the rest once."""
    console = console or report_console(stderr=True)
    started = time.monotonic()
    spend = Spend()
    spent = budget.already_spent(exp.stop, exp.storage_url, study_name or exp.name)
    with spend.counting():  # the test requests, and any question generation
        inputs = load_inputs(exp, strict, system, concurrency, preflight=spent is None, study_name=study_name)
    data = inputs.data
    plan = staged.plan_of(exp, data.space, n_trials)
    study = open_study(exp, data.space, name=study_name)
    staged.check_strategy(study, exp.strategy)
    provenance = study_provenance(exp, data.space, data.corpus.fingerprint(), inputs.questions_file,
                             inputs.questions, data.questions)
    check_same_data(study, provenance)
    settled = data.settle(study)  # the objective as the study decided it, over what its systems produce
    tracker = _tracker(exp, study.study_name, provenance, data.questions, settled.objective.weights)
    status, parent_run_id = "FAILED", ""
    try:
        _estimate_once(study, exp, data, n_trials if plan is None else plan.generation_trials,
                       inputs.held_out)
        agreement = finish.judge_agreement(study, exp, settled, console)
        with blas_on_one_thread():
            _set_depth(data, data.space)
            parent_run_id = tracker.ready()
            if inputs.generated:
                _log_synth_report(exp, inputs.questions_file)
            if plan is None:
                (trials or _run_trials)(study, exp, data, tracker, console, n_trials, inputs.held_out)
            else:
                _run_stages(study, exp, data, tracker, console, staged.resumed(plan, study), provenance,
                            inputs.held_out)
            settled = data.settle(study)  # as its trials (of any worker) settled it
            with spend.track("held_out"):
                held = (None if inputs.held_out is None
                        else finish.held_out_once(study, inputs.held_out, settled, console))
            if held is not None:
                study.set_user_attr("held_out", held.to_dict())
            seconds = time.monotonic() - started
            with spend.track("selection"):
                selection = finish.selection_once(study, settled)
            finish.record_spend(study, spend)
            summary = finish.summary(study, exp, provenance, settled.objective, held, selection, seconds,
                                      agreement)
            if plan is not None and exp.stages.prompt:  # the staged prompt stage, over the winner
                summary = replace(summary, prompt_tuning=prompt_stage.stage(
                    study, exp, settled, inputs.held_out, parent_run_id, console))
            board = leaderboard(study)
            tracker.log_study(summary, board, plots(study, exp))
            status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        finish.record_spend(study, spend)  # a stopped run's requests count in the next summary
        tracker.close(status, console)
    result = StudyResult(study.study_name, exp.storage_url, exp.tracking_uri, parent_run_id, summary, board,
                         study, workdir=exp.work_dir, qdrant=exp.qdrant)
    ranked = ranked_trials(study)
    if ranked and (record := TrialRecord.of(ranked[0])) is not None:
        result.best_value, result.best_params = record.composite, dict(ranked[0].params)
        result.best_config = dict(record.config)
    return result


@contextmanager
def blas_on_one_thread() -> Iterator[None]:
    """numpy's OpenBLAS on one thread while a study runs. Its products here are small
    (bootstrap resamples, rescoring a few hundred candidates), and between them its idle threads spin on
    the cores the MLflow writer and Qdrant Edge need: AutoRAG's space of 484 trials took 131 s with them
    and 115 s without, on 2 cores. Torch's threads (embedding, reranking) are not OpenBLAS's and keep
    their number."""
    from threadpoolctl import ThreadpoolController

    with ThreadpoolController().select(internal_api="openblas").limit(limits=1):
        yield


def estimate_study(
    exp: ExperimentConfig, *, n_trials: int | None = None, study_name: str | None = None,
    strict: bool = False,
) -> Estimate:
    """What running the study would cost in LLM requests, dollars and time (``composer.cost.estimate``):
    no trial runs, no study is created; two test requests per endpoint time it."""
    from composer.data import load_corpus
    from composer.errors import InputError
    from composer.study.estimate import price_study

    if exp.synth is not None and exp.corpus is not None:
        from composer.synth import cache_path

        if not cache_path(load_corpus(exp.corpus), exp.synth, exp.work_dir).exists():
            raise ConfigError("the questions are not generated yet: run the study (or composer synth) first; "
                              "the estimate covers the trials", field="synth")
    target = n_trials if n_trials is not None else exp.n_trials
    if target is None:
        raise ConfigError(f"an estimate needs a number of trials ({option('n_trials', 'N')})",
                          field="n_trials")
    inputs = load_inputs(exp, strict, None, 8, preflight=False, study_name=study_name)
    plan = staged.plan_of(exp, inputs.data.space, target)  # stage 1 calls no LLM
    target = target if plan is None else plan.generation_trials
    name = study_name or exp.name
    try:
        study: optuna.Study | None = load_study(name, exp.storage_url)
    except InputError:  # no study yet: every trial is to run
        study = None
    held = len(inputs.held_out) if inputs.held_out is not None else 0
    return price_study(inputs.data, study, name=name, target=target, held_out=held, timed=True)


def _estimate_once(
    study: optuna.Study, exp: ExperimentConfig, data: StudyData, n_trials: int | None,
    held_out: QuestionSet | None,
) -> None:
    """Before a study's first trial, its LLM estimate, stored for the summary to set beside what it spent
    (an LLM study of a pipeline space with a number of trials only)."""
    from composer.study.estimate import price_study

    target = n_trials if n_trials is not None else exp.n_trials
    if finish.ESTIMATE_ATTR in study.user_attrs or target is None or data.system is not None:
        return
    if not data.llm_endpoints():
        return
    held = len(held_out) if held_out is not None else 0
    try:
        estimate = price_study(data, study, name=study.study_name, target=target, held_out=held)
    except Exception as exc:  # an estimate that cannot be made must not stop the study it describes
        logging.getLogger(__name__).warning("no LLM cost estimate for this study: %s", exc)
        return
    study.set_user_attr(finish.ESTIMATE_ATTR, estimate.headline())


def _tracker(
    exp: ExperimentConfig, name: str, provenance: dict[str, Any], selection: QuestionSet,
    weights: Iterable[str] = (),
) -> StudyTracker:
    """The study's MLflow writer, with the gold answers its traces are assessed against and the weighted
    metrics its runs page view shows."""
    from composer.tracking.setup import is_local_store
    from composer.tracking.writer import StudyTracker, WriterSettings

    return StudyTracker(
        WriterSettings(
            exp.tracking_uri,
            exp.mlflow_experiment,
            name,
            spool=exp.work_dir / "spool" / name,
            artifact_root=exp.work_dir / "mlartifacts" if is_local_store(exp.tracking_uri) else None,
            max_traces=exp.mlflow.traces,
            study_params=_study_params(exp, provenance),
            storage=exp.storage_url,
            expectations={
                q.id: {"expected_ids": list(q.relevant_ids), "expected_response": q.reference_answer}
                for q in selection
            },
            columns=tuple(weights),
            factory=bool(provenance.get("factory")),
        )
    )


def _run_trials(
    study: optuna.Study,
    exp: ExperimentConfig,
    data: StudyData,
    tracker: StudyTracker,
    console: Console,
    n_trials: int | None,
    held_out: QuestionSet | None,
) -> None:
    """Record the trials lost by earlier runs, then run the trials still missing (to ``n_trials``, or the
    experiment's) with a live view, stopping on Ctrl-C or when too many fail."""
    from composer.study.live import StudyProgress
    from composer.study.steering import ConstantMetrics

    todo = trials_to_run(study, exp, data, tracker, console, n_trials, held_out)
    if todo is None:
        return
    target, done = todo
    guard = _optimize.FailureGuard(exp.stop)
    with StudyProgress(console, target, done, exp.timeout) as progress, _optimize.CtrlC() as ctrl_c:
        runner = TrialRunner(data, target=target, on_stage=progress.stage, on_start=progress.watch,
                             stop=exp.stop, spool=tracker.spool)
        steering = ConstantMetrics(lambda: data.settle(study).objective.weights)
        hooks: list[_optimize.TrialHook] = [ctrl_c.hook, progress, guard, steering]
        if target is not None:
            hooks.insert(0, _optimize.stop_at(target))
        callback = _optimize.after_each_trial(
            *hooks, tracker=tracker, untagged_after_s=2 * exp.heartbeat_interval
        )
        _optimize.optimize(study, runner, timeout=exp.timeout, callback=callback, tracker=tracker)
    guard.raise_if_stopped(study.study_name)
    spent = budget.reason(exp.stop, study)
    if spent is not None:
        console.print(f"study [bold]{study.study_name}[/bold] stopped: {spent}; it ends with the best trial "
                      "so far (raise stop.max_cost_usd / max_llm_calls and run again to go on)",
                      highlight=False)


def trials_to_run(
    study: optuna.Study,
    exp: ExperimentConfig,
    data: StudyData,
    tracker: StudyTracker,
    console: Console,
    n_trials: int | None,
    held_out: QuestionSet | None,
) -> tuple[int | None, int] | None:
    """Record the trials lost by earlier runs and say, in one line on ``console``, what is left: the
    target and the trials finished (None: nothing to run, the target reached or the budget spent)."""
    _optimize.record_lost_trials(study, tracker, untagged_after_s=2 * exp.heartbeat_interval)
    target = n_trials if n_trials is not None else exp.n_trials
    done = _optimize.finished_distinct(study)
    remaining = None if target is None else max(target - done, 0)
    if target is not None and _optimize.target_reached(study, target):
        remaining = 0
    console.print(
        f"study [bold]{study.study_name}[/bold]: {done} trials finished"
        + (f", {remaining} to run" if remaining is not None else "")
        + f" · {len(data.questions)} questions"
        + (f" (+{len(held_out)} held out)" if held_out else ""),
        highlight=False,
    )
    if (spent := budget.reason(exp.stop, study)) is not None and remaining != 0:
        console.print(f"study [bold]{study.study_name}[/bold]: {spent}; nothing is run "
                      "(raise stop.max_cost_usd / max_llm_calls to go on)", highlight=False)
    if remaining == 0 or spent is not None:
        return None
    return target, done


def run_worker(
    exp: ExperimentConfig, *, n_trials: int | None = None, study_name: str | None = None,
    console: Console | None = None, strict: bool = False,
) -> None:
    """One worker of a study that another process drives (``run_study`` with ``trials``, on Ray): its
    trials only, under the driver's MLflow parent run; the held-out re-score and summary are the
    driver's."""
    console = console or report_console(stderr=True)
    inputs = load_inputs(exp, strict, None, 8, preflight=False, study_name=study_name)
    data = inputs.data
    study = open_study(exp, data.space, name=study_name)
    provenance = study_provenance(exp, data.space, data.corpus.fingerprint(), inputs.questions_file,
                                  inputs.questions, data.questions)
    check_same_data(study, provenance)
    settled = data.settle(study)
    tracker = _tracker(exp, study.study_name, provenance, data.questions, settled.objective.weights)
    status = "FAILED"
    try:
        with blas_on_one_thread():
            _set_depth(data, data.space)
            tracker.ready()
            _run_trials(study, exp, data, tracker, console, n_trials, inputs.held_out)
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        tracker.close(status, console)


def _run_stages(
    study: optuna.Study,
    exp: ExperimentConfig,
    data: StudyData,
    tracker: StudyTracker,
    console: Console,
    plan: staged.Plan,
    provenance: dict[str, Any],
    held_out: QuestionSet | None,
) -> None:
    """A staged study (``composer.study.staged``): stage 1 until stage 2 begins, then stage 2's trials."""
    if not staged.started(study):
        first = _retrieval_stage(study.study_name, exp, data, console, plan, provenance)
        staged.record_first_stage(study, first, plan)
    staged.second_stage(study, exp, data.space, plan)
    _run_trials(study, exp, data, tracker, console, plan.generation_trials, held_out)


def _retrieval_stage(
    name: str, exp: ExperimentConfig, data: StudyData, console: Console, plan: staged.Plan,
    provenance: dict[str, Any],
) -> optuna.Study:
    """Run (or continue) stage 1, a study of its own with its own MLflow parent run; the study."""
    first_exp, first_data = staged.first_stage(exp, data, plan, name)
    first = open_study(first_exp, first_data.space, name=first_exp.name)
    settled = first_data.settle(first)
    first_provenance = {**provenance, "objective": first_exp.objective.model_dump()}
    check_same_data(first, first_provenance)
    tracker = _tracker(first_exp, first.study_name, first_provenance, first_data.questions,
                       settled.objective.weights)
    status = "FAILED"
    try:
        tracker.ready()
        _run_trials(first, first_exp, first_data, tracker, console, plan.retrieval_trials, None)
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        tracker.close(status, console)
    return first


def _set_depth(data: StudyData, space: SearchSpace) -> None:
    """Every first-stage search of the study as deep as any configuration of ``space`` searches, so the
    first trial's candidates serve every later one."""
    from composer.pipeline.workspace import Workspace

    if data.system is None:  # a user's system searches as deep as it likes
        Workspace.get(data.workdir, data.qdrant).depth = space.max_depth()


def _log_synth_report(exp: ExperimentConfig, questions_file: Path) -> None:
    """A generated set's report as its own MLflow run (``synth-<seed>``) beside the study's."""
    from composer.tracking.synth import log_report_to_mlflow

    report = json.loads(questions_file.with_suffix(".report.json").read_text(encoding="utf-8"))
    log_report_to_mlflow(report, exp.tracking_uri, exp.mlflow_experiment, questions=questions_file)


def _study_params(exp: ExperimentConfig, provenance: dict[str, Any]) -> dict[str, Any]:
    return {
        "corpus": provenance["corpus"],
        "corpus_fingerprint": provenance["corpus_fingerprint"],
        "questions": provenance["questions"],
        "selection_fingerprint": provenance["selection_fingerprint"],
        "search_space": provenance["search_space"],
        "objective": exp.objective.model_dump(),
        "sampler": exp.sampler.name,
        "pruner": exp.pruner.name,
        "batch_size": exp.batch_size,
        "split": provenance["split"],
        "storage": scrub_url(exp.storage_url),
    }
