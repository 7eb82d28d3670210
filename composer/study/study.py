"""Run a study: open (or resume) the Optuna study, optimize with a live view, re-score the winner, report.

Resuming is the default: the study lives in an RDB storage (SQLite in the workdir unless told otherwise)
and is loaded if it exists. ``n_trials`` is the study's total of finished (complete or pruned) distinct
configurations, so running the same command again only runs what is missing; a configuration TPE proposes
again is answered from its earlier trial and does not use up a slot (within ``REPEAT_ALLOWANCE``).
Trials alive in a process that died stop sending heartbeats; once their grace period passes they are
marked failed and retried with the same parameters (RetryHeartbeatStaleTrialCallback), and their MLflow
record says so.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import random
import socket
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from composer.data.types import QuestionSet
from composer.errors import ComposerError, ConfigError, InputError
from composer.study.experiment import ExperimentConfig, PrunerConfig, SplitConfig
from composer.study.leaderboard import STUDY_ATTR, leaderboard, ranked_trials, report_console
from composer.study.objective import Objective
from composer.study.runner import LLM_USAGE_ATTR, StudyData, TrialRunner
from composer.study.space import SearchSpace, load_search_space
from composer.study.tracking import StudyTracker, is_local_store, scrub_url

if TYPE_CHECKING:
    import optuna
    import pandas as pd
    from rich.console import Console

logger = logging.getLogger(__name__)

SCHEMA_ATTEMPTS = 6
"""Tries at opening a storage whose fresh schema other workers may be creating at the same moment."""

WORKER = f"{socket.gethostname()}:{os.getpid()}"
"""Recorded on each trial: which of a study's workers ran it."""

T = TypeVar("T")


@dataclass
class StudyResult:
    name: str
    storage: str
    tracking_uri: str
    parent_run_id: str
    summary: dict[str, Any]
    leaderboard: pd.DataFrame


def composer_version() -> str:
    try:
        return importlib.metadata.version("composer-rag")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def split_questions(
    questions: QuestionSet, split: SplitConfig | None
) -> tuple[QuestionSet, QuestionSet | None]:
    """Selection and held-out sets by a seeded hash of each id: the same sets whatever the file's order.

    Both keep the file's order, so batches (and pruning steps) see the same questions in every trial.
    """
    if split is None:
        return questions, None
    ranked = sorted(questions, key=lambda q: hashlib.sha256(f"{split.seed}:{q.id}".encode()).hexdigest())
    n_held = round(len(ranked) * split.held_out)
    if n_held == 0 or n_held == len(ranked):
        raise ConfigError(f"holding out {split.held_out:.0%} of {len(ranked)} questions leaves a side empty",
                          field="split.held_out")
    held = {q.id for q in ranked[:n_held]}
    return (QuestionSet([q for q in questions if q.id not in held], questions.source),
            QuestionSet([q for q in questions if q.id in held], questions.source))


def make_storage(url: str, heartbeat_interval: int | None = None) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage; with a heartbeat, trials of dead processes are failed and retried.

    A URL that cannot be opened (malformed, no driver for it, a server that is down or refuses us) is
    an InputError naming it, its password masked.
    """
    from optuna.exceptions import ExperimentalWarning
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
    from sqlalchemy import exc

    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    try:
        if heartbeat_interval is None:
            return _despite_schema_race(lambda: RDBStorage(url))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            return _despite_schema_race(lambda: RDBStorage(
                url,
                heartbeat_interval=heartbeat_interval,
                grace_period=2 * heartbeat_interval,
                heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=2),
            ))
    except (exc.ArgumentError, exc.OperationalError, ImportError) as err:
        if isinstance(err, exc.OperationalError):
            reason = str(err.orig)
        elif isinstance(err, ImportError):
            reason = f"no database driver for it ({err.__cause__ or err})"
        else:
            reason = str(err)
        reason = scrub_url(" ".join(reason.split()))
        raise InputError(f"cannot open the Optuna storage {scrub_url(url)}: {reason}",
                         field="storage") from None


def _despite_schema_race(open_storage: Callable[[], T]) -> T:
    """Open a storage, again if another worker was creating the same fresh schema at that moment.

    Optuna creates its tables and version rows on first open; two workers doing it at once collide
    (a table, type or row that appeared in between). Each step is idempotent, so a retry finds the
    schema complete. Errors of any other kind (a wrong URL, a server down) are raised at once.
    """
    from sqlalchemy import exc

    attempt = 1
    while True:
        try:
            return open_storage()
        except (exc.IntegrityError, exc.ProgrammingError, exc.OperationalError) as err:
            message = str(err.orig).lower()
            racing = isinstance(err, exc.IntegrityError) or "already exists" in message or "locked" in message
            if not racing or attempt == SCHEMA_ATTEMPTS:
                raise
            logger.debug("storage schema busy (attempt %d): %s", attempt, message)
            time.sleep(0.1 * attempt + 0.2 * random.random())
            attempt += 1


def make_sampler(exp: ExperimentConfig, space: SearchSpace, seed_offset: int) -> optuna.samplers.BaseSampler:
    """The configured sampler, seeded ``seed + seed_offset``; a study seeds one per trial (see
    composer.study.seeding), so no two trials, whichever worker runs them, share a seed.

    The grid sampler alone keeps ``seed``: its seed shuffles the grid, and trials (of every worker)
    name their grid point by its index in that order, so it must be one order for the whole study.
    """
    import optuna

    cfg = exp.sampler
    name = cfg.name
    if name == "auto":
        name = "nsga2" if exp.multi_objective else "tpe"
    options = cfg.options
    try:
        if name == "grid":
            return optuna.samplers.GridSampler(space.grid(), seed=cfg.seed, **options)
        seed = None if cfg.seed is None else cfg.seed + seed_offset
        cls = {"tpe": optuna.samplers.TPESampler, "random": optuna.samplers.RandomSampler,
               "nsga2": optuna.samplers.NSGAIISampler}[name]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return cls(seed=seed, **options)
    except TypeError as exc:
        raise ConfigError(f"bad option for the {name} sampler: {exc}", field="sampler") from None


def study_sampler(exp: ExperimentConfig, space: SearchSpace) -> optuna.samplers.BaseSampler:
    """The study's sampler: seeded per trial (composer.study.seeding) when it draws at random and has a
    seed. The grid sampler needs no per-trial seed: it hands each trial, whichever worker asks, a grid
    point no trial has taken yet, read from the storage."""
    if exp.sampler.seed is None or exp.sampler.name == "grid":
        return make_sampler(exp, space, 0)
    from composer.study.seeding import TrialSeededSampler

    return TrialSeededSampler(lambda number: make_sampler(exp, space, number))


def make_pruner(cfg: PrunerConfig) -> optuna.pruners.BasePruner:
    """The configured pruner; the median pruner waits for 3 trials and prunes from the second batch on."""
    import optuna

    defaults: dict[str, dict[str, Any]] = {"median": {"n_startup_trials": 3, "n_warmup_steps": 1},
                                           "percentile": {"percentile": 25.0, "n_startup_trials": 3,
                                                          "n_warmup_steps": 1}}
    options = {**defaults.get(cfg.name, {}), **cfg.options}
    cls = {"median": optuna.pruners.MedianPruner, "percentile": optuna.pruners.PercentilePruner,
           "hyperband": optuna.pruners.HyperbandPruner,
           "successive_halving": optuna.pruners.SuccessiveHalvingPruner,
           "none": optuna.pruners.NopPruner}[cfg.name]
    try:
        return cls(**options)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"bad option for the {cfg.name} pruner: {exc}", field="pruner") from None


def open_study(exp: ExperimentConfig, space: SearchSpace, *, name: str | None = None) -> optuna.Study:
    """Create the study, or load it (same storage and name) to continue where it stopped."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    failures = logging.getLogger("optuna.study._optimize")  # where Optuna reports a failed trial
    if not any(isinstance(f, _NoTracebackForComposerErrors) for f in failures.filters):
        failures.addFilter(_NoTracebackForComposerErrors())
    study_name = name or exp.name
    storage = make_storage(exp.storage_url, exp.heartbeat_interval)
    directions = ["maximize", *exp.secondary_directions()]
    # Workers creating a new study together: Optuna turns the loser's insert into loading the winner's.
    study = optuna.create_study(
        storage=storage, sampler=study_sampler(exp, space), pruner=make_pruner(exp.pruner),
        study_name=study_name, directions=directions, load_if_exists=True,
    )
    if [d.name.lower() for d in study.directions] != directions:
        raise ConfigError(f"study '{study_name}' exists with other objectives "
                          f"({[d.name.lower() for d in study.directions]}); choose another --study-name",
                          field="objective")
    return study


def load_study(name: str, storage_url: str) -> optuna.Study:
    """An existing study, for reading (`composer trials`, `composer export`)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    shown = scrub_url(storage_url)
    if storage_url.startswith("sqlite:///") and not Path(storage_url.removeprefix("sqlite:///")).exists():
        raise InputError(f"no study storage at {shown} (give --experiment or --storage)")
    storage = make_storage(storage_url)
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        names = [s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)]
        raise InputError(f"no study '{name}' in {shown} (studies there: {', '.join(names) or 'none'})"
                         ) from None


def run_study(
    exp: ExperimentConfig,
    *,
    n_trials: int | None = None,
    study_name: str | None = None,
    console: Console | None = None,
) -> StudyResult:
    """Optimize (or continue) the experiment's study and report it; see the module docstring."""
    import optuna

    from composer.data import load_corpus, load_questions
    from composer.study.live import StudyProgress

    console = console or report_console(stderr=True)
    started = time.monotonic()
    space = load_search_space(exp.search_space)
    corpus = load_corpus(exp.corpus)
    questions = load_questions(exp.questions, corpus=corpus)
    selection, held_out = split_questions(questions, exp.split)
    data = StudyData(
        corpus=corpus, questions=selection, space=space, objective=exp.objective, workdir=exp.work_dir,
        qdrant=exp.qdrant, batch_size=exp.batch_size, llm=exp.llm, judge=exp.judge,
    )
    # Settings no trial could run with fail here, before the study starts, not once per trial: an unset
    # key variable, a judge without a model.
    if exp.llm is not None:
        exp.llm.api_key()
    data.judging  # noqa: B018 - builds the study's one judge
    study = open_study(exp, space, name=study_name)
    provenance = _provenance(exp, space, corpus.fingerprint(), questions, selection)
    _check_same_data(study, provenance)

    tracker = StudyTracker(
        exp.tracking_uri, exp.mlflow_experiment, study.study_name,
        artifact_root=exp.work_dir / "mlartifacts" if is_local_store(exp.tracking_uri) else None,
        max_traces=exp.mlflow.traces, study_params=_study_params(exp, provenance),
    )
    _record_lost_trials(study, tracker)
    runner = TrialRunner(data, tracker)
    target = n_trials if n_trials is not None else exp.n_trials
    finished_states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    done = len(_distinct(study.get_trials(deepcopy=False, states=finished_states)))
    remaining = None if target is None else max(target - done, 0)
    if target is not None and _target_reached(study, target):
        remaining = 0
    console.print(f"study [bold]{study.study_name}[/bold]: {done} trials finished"
                  + (f", {remaining} to run" if remaining is not None else "")
                  + f" · {len(selection)} questions" + (f" (+{len(held_out)} held out)" if held_out else ""),
                  highlight=False)
    status = "FAILED"
    callbacks: list[Any] = []
    if target is not None:
        callbacks.append(_stop_at(target))
    objective = _first_trials_only(target, runner, tracker)
    try:
        if remaining != 0:
            with StudyProgress(console, target, done, exp.timeout) as progress:
                # No trial count here: repeats free their slot, so _stop_at ends the loop.
                study.optimize(objective, n_trials=None if target is not None else remaining,
                               timeout=exp.timeout, catch=(Exception,),
                               callbacks=[*callbacks, progress])
        held = None
        if held_out is not None:
            held = _held_out(study, held_out, runner, console)
        if runner.objective is not None:
            study.set_user_attr("objective_weights", dict(runner.objective.weights))
        if held is not None:
            study.set_user_attr("held_out", held)
        seconds = time.monotonic() - started
        summary, metrics = _summary(study, exp, provenance, runner.objective, held, seconds)
        board = leaderboard(study)
        tracker.log_study(summary, metrics, board, summary.get("best_config"), _plots(study, exp))
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        tracker.close(status)
    return StudyResult(study.study_name, exp.storage_url, exp.tracking_uri, tracker.parent_run_id, summary,
                       board)


class SurplusTrial(ComposerError):
    """A trial started after the study's target was reached (by other workers): failed unscored."""


class _NoTracebackForComposerErrors(logging.Filter):
    """Optuna logs every failed trial with its traceback; a ComposerError (an invalid sampled combination,
    a failure budget exceeded, a surplus trial) says it all in its message, which the live view prints."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info is not None and isinstance(record.exc_info[1], ComposerError):
            record.exc_info = None
        return True


def _holding_states() -> tuple[optuna.trial.TrialState, ...]:
    """The trials that hold one of the study's ``n_trials`` slots: finished ones and those another
    worker is running. Waiting trials (enqueued, or a retry of a dead worker's) hold none: they are
    what is left to run, so counting them would stop the study before running them."""
    from optuna.trial import TrialState

    return TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING


REPEAT_ALLOWANCE = 2
"""A study stops at ``n_trials`` distinct configurations, or at this many times ``n_trials`` trials in all,
so a search space smaller than ``n_trials`` (or a sampler stuck on one point) still ends."""


def _distinct(trials: Sequence[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    """Trials that are not a repeat of an earlier trial's configuration (repeats are marked when they end;
    a running trial counts as distinct until then)."""
    return [t for t in trials if "duplicate_of" not in t.user_attrs]


def _target_reached(study: optuna.Study, target: int, before: int | None = None) -> bool:
    """``target`` distinct slot-holding trials (numbered below ``before``), or the repeat allowance spent."""
    trials = [t for t in study.get_trials(deepcopy=False, states=_holding_states())
              if before is None or t.number < before]
    return len(_distinct(trials)) >= target or len(trials) >= REPEAT_ALLOWANCE * target


def _stop_at(target: int) -> Callable[[optuna.Study, optuna.trial.FrozenTrial], None]:
    """Optuna callback: stop this worker once the study holds its ``target`` (see ``_target_reached``)."""

    def callback(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if _target_reached(study, target):
            study.stop()

    return callback


def _first_trials_only(
    target: int | None, runner: TrialRunner, tracker: StudyTracker
) -> Callable[[optuna.Trial], Any]:
    """The objective for the first ``target`` trials that hold a slot, in trial-number order (every
    trial without a target), each recording the worker that ran it.

    Two workers checking the count at the same instant may both start one more trial; numbers are
    unique, so every worker agrees which is surplus: it stops its worker and fails unscored.
    """

    def objective(trial: optuna.Trial) -> Any:
        trial.set_user_attr("worker", WORKER)
        if target is None:
            return runner(trial)
        if _target_reached(trial.study, target, before=trial.number):
            trial.study.stop()
            reason = f"surplus: the study's {target} trials were already taken by other workers"
            trial.set_user_attr("error", reason)
            tracker.log_failed_trial(trial.number, None, reason)
            raise SurplusTrial(reason)
        return runner(trial)

    return objective


def _provenance(exp: ExperimentConfig, space: SearchSpace, corpus_fp: str, questions: QuestionSet,
                selection: QuestionSet) -> dict[str, Any]:
    """What the study was run on; stored on the study, exported with the winner."""
    return {
        "experiment": exp.name,
        "corpus": str(exp.corpus),
        "corpus_fingerprint": corpus_fp,
        "questions": str(exp.questions),
        "questions_fingerprint": questions.fingerprint(),
        "selection_fingerprint": selection.fingerprint(),
        "n_selection": len(selection),
        "split": None if exp.split is None else exp.split.model_dump(),
        "search_space": space.source,
        "k_eval": exp.objective.k,
        "objective": exp.objective.model_dump(),
        "composer_version": composer_version(),
    }


def _check_same_data(study: optuna.Study, provenance: dict[str, Any]) -> None:
    """Continuing a study on changed data would rank trials scored on different questions together."""
    stored = study.user_attrs.get(STUDY_ATTR)
    if stored is None:
        study.set_user_attr(STUDY_ATTR, {**provenance, "created": datetime.now(timezone.utc).isoformat()})
        return
    for key in ("corpus_fingerprint", "selection_fingerprint", "k_eval"):
        if stored.get(key) != provenance[key]:
            raise ConfigError(f"study '{study.study_name}' was run with another {key.replace('_', ' ')} "
                              f"({stored.get(key)} vs {provenance[key]}); use a new --study-name",
                              field=key)


def _study_params(exp: ExperimentConfig, provenance: dict[str, Any]) -> dict[str, Any]:
    return {
        "corpus": provenance["corpus"], "corpus_fingerprint": provenance["corpus_fingerprint"],
        "questions": provenance["questions"], "selection_fingerprint": provenance["selection_fingerprint"],
        "search_space": provenance["search_space"], "objective": exp.objective.model_dump(),
        "sampler": exp.sampler.name, "pruner": exp.pruner.name, "batch_size": exp.batch_size,
        "split": provenance["split"],
    }


def _record_lost_trials(study: optuna.Study, tracker: StudyTracker) -> None:
    """Fail the trials of dead processes now (and queue their retry), and give each a FAILED run."""
    import optuna
    from optuna.trial import TrialState

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    failed = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
    if not failed:
        return
    logged = tracker.logged_trials()
    reason = "the process running this trial stopped (no heartbeat); retried"
    for t in failed:
        if t.number not in logged:
            tracker.log_failed_trial(t.number, t.user_attrs.get("config"), reason)
        elif logged[t.number][1] == "RUNNING":
            tracker.mark_failed(logged[t.number][0], reason)


def _held_out(
    study: optuna.Study, questions: QuestionSet, runner: TrialRunner, console: Console
) -> dict[str, Any] | None:
    """Re-score the winner and the runner-up on the held-out questions; CI of their paired difference.

    The trials are done by then: a re-score that fails (over the LLM failure budget, say) is reported as
    ``"error"`` (with the winner's result if only the runner-up failed) instead of failing the study.
    """
    from composer.metrics.stats import paired_bootstrap_ci
    from composer.pipeline.config import PipelineConfig

    ranked = ranked_trials(study)
    if not ranked:
        return None
    data = runner.data
    contenders = ranked[:2]
    names = ", ".join(f"#{t.number}" for t in contenders)
    console.print(f"re-scoring {names} on {len(questions)} held-out questions", highlight=False)
    out: dict[str, Any] = {"n_questions": len(questions)}
    scores = []
    for t in contenders:
        try:
            pipeline = data.pipeline(PipelineConfig.from_dict(t.user_attrs["config"]))
            pipeline.index(data.corpus)
            scored = data.score(pipeline, questions, batch_size=len(questions))
        except Exception as exc:
            out["error"] = f"re-scoring trial #{t.number} failed: {type(exc).__name__}: {exc}"[:4000]
            console.print(f"held-out {out['error']}", style="red", markup=False, highlight=False)
            break
        scores.append(scored)
    if not scores:
        return out
    objective = runner.objective_for(scores[0].report)
    for role, t, scored in zip(("winner", "runner_up"), contenders, scores, strict=False):
        out[role] = {"trial": t.number, "selection_composite": t.user_attrs["metrics"]["composite"],
                     "held_out_composite": objective.composite(scored.report.means())}
    if len(scores) == 2:
        pairs = [(objective.per_question(a.metrics), objective.per_question(b.metrics))
                 for a, b in zip(scores[0].report.samples, scores[1].report.samples, strict=True)]
        kept = [(a, b) for a, b in pairs if a is not None and b is not None]
        if kept:
            a_vals, b_vals = [a for a, _ in kept], [b for _, b in kept]
            low, high = paired_bootstrap_ci(a_vals, b_vals)
            diff = sum(a_vals) / len(a_vals) - sum(b_vals) / len(b_vals)
            out["difference"] = {"mean": diff, "ci95": [low, high], "n_paired": len(kept),
                                 "winner_really_better": low > 0}
    return out


def encode_summary(study: optuna.Study) -> dict[str, int]:
    """How much indexing the study paid for: index builds, encode passes, reuses, repeats skipped."""
    ran = [t for t in study.get_trials(deepcopy=False)
           if "index_key" in t.user_attrs and "duplicate_of" not in t.user_attrs]
    builds = [t for t in ran if not t.user_attrs.get("index_reused", True)]
    return {
        "trials_indexed": len(ran),
        "unique_index_keys": len({t.user_attrs["index_key"] for t in ran}),
        "index_builds": len(builds),
        "encode_passes": sum(1 for t in builds if t.user_attrs.get("index_embeddings_computed", 0) > 0),
        "index_reuses": len(ran) - len(builds),
        "embeddings_computed": sum(int(t.user_attrs.get("index_embeddings_computed", 0)) for t in ran),
        "repeats_skipped": sum(1 for t in study.get_trials(deepcopy=False) if "duplicate_of" in t.user_attrs),
    }


def llm_totals(study: optuna.Study) -> dict[str, float]:
    """The study's LLM spending (calls, cached calls, tokens, cost, failures): every trial's own, pruned
    and failed ones included, whichever worker ran it; empty when no trial called an LLM."""
    totals: dict[str, float] = {}
    for t in study.get_trials(deepcopy=False):
        for name, value in t.user_attrs.get(LLM_USAGE_ATTR, {}).items():
            totals[name] = totals.get(name, 0.0) + float(value)
    return {name: round(total, 8) for name, total in totals.items()}  # no float noise in a cost


def _summary(study: optuna.Study, exp: ExperimentConfig, provenance: dict[str, Any],
             objective: Objective | None, held: dict[str, Any] | None,
             seconds: float) -> tuple[dict[str, Any], dict[str, float]]:
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)  # one read of the storage for the counts and errors
    counts = {state.name: sum(t.state == state for t in trials)
              for state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)}
    ranked = ranked_trials(study)
    best = ranked[0] if ranked else None
    encode = encode_summary(study)
    llm = llm_totals(study)
    summary: dict[str, Any] = {
        "study": study.study_name,
        "storage": scrub_url(exp.storage_url),
        "n_trials": len(trials),
        "n_complete": counts["COMPLETE"],
        "n_pruned": counts["PRUNED"],
        "n_failed": counts["FAIL"],
        "best_trial": None if best is None else best.number,
        "best_value": None if best is None else best.user_attrs["metrics"]["composite"],
        "best_metrics": None if best is None else best.user_attrs["metrics"],
        "best_config": None if best is None else best.user_attrs["config"],
        "objective": {"k_eval": exp.objective.k, "configured": exp.objective.metrics,
                      "weights": (study.user_attrs.get("objective_weights") if objective is None
                                  else dict(objective.weights)),
                      "notes": [] if objective is None else list(objective.notes),
                      "secondary": list(exp.objective.secondary)},
        "encode": encode,
        "llm_usage": llm or None,
        "errors": sorted({str(t.user_attrs["error"]) for t in trials
                          if t.state == TrialState.FAIL and "error" in t.user_attrs})[:10],
        "held_out": held,
        "data": provenance,
        "seconds": seconds,
    }
    if exp.multi_objective:
        summary["pareto_front"] = sorted(t.number for t in study.best_trials)
    metrics: dict[str, float] = {k: float(v) for k, v in counts.items()}
    metrics.update({k: float(v) for k, v in encode.items()})
    metrics.update(llm)
    if best is not None:
        metrics["best_value"] = float(best.user_attrs["metrics"]["composite"])
        metrics["best_trial"] = float(best.number)
    if held and "difference" in held:
        metrics["held_out_difference"] = float(held["difference"]["mean"])
    metrics["seconds"] = seconds
    return summary, metrics


def _plots(study: optuna.Study, exp: ExperimentConfig) -> dict[str, str]:
    """Optuna's history, importance and parallel-coordinate plots as self-contained (offline) HTML."""
    from optuna import visualization as vis
    from optuna.trial import FrozenTrial, TrialState

    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return {}  # nothing to draw: Optuna would only print a warning per plot

    def composite(t: FrozenTrial) -> float:
        return float(t.values[0])

    kw: dict[str, Any] = {"target": composite, "target_name": "composite"} if exp.multi_objective else {}
    makers: dict[str, Any] = {
        "optimization_history": lambda: vis.plot_optimization_history(study, **kw),
        "param_importances": lambda: _importances(study, kw),
        "parallel_coordinate": lambda: vis.plot_parallel_coordinate(study, **kw),
    }
    if exp.multi_objective:
        names = ["composite", *exp.objective.secondary]
        makers["pareto_front"] = lambda: vis.plot_pareto_front(study, target_names=names)
    out: dict[str, str] = {}
    for name, make in makers.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # Optuna's notes on tiny studies
                out[name] = make().to_html(include_plotlyjs=True, full_html=True)
        except Exception as exc:  # a plot Optuna cannot draw yet (e.g. importances of 1 trial) is skipped
            logger.warning("plot %s skipped: %s", name, exc)
    return out


def _importances(study: optuna.Study, kw: dict[str, Any]) -> Any:
    """fANOVA reads variance whatever the direction (Optuna's default, PED-ANOVA, assumes a custom target
    is minimized: it would invert the composite's importances); it needs some variance among trials."""
    import optuna
    from optuna import visualization as vis

    fanova = optuna.importance.FanovaImportanceEvaluator(seed=0)
    try:
        return vis.plot_param_importances(study, evaluator=fanova, **kw)
    except RuntimeError:  # zero variance: too few distinct results yet
        return vis.plot_param_importances(study, **kw)
