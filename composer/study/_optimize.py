"""The optimization loop: how many trials a study runs, which trials hold a slot, and what ends it.

``n_trials`` counts finished (complete or pruned) distinct configurations, so running the same command
again only runs what is missing; a configuration the sampler proposes again is answered from its earlier
trial and does not use up a slot (within ``REPEAT_ALLOWANCE``). Trials alive in a process that died are
failed and their retry queued (``record_lost_trials``). Trials that keep failing end the study
(``FailureGuard``): failed trials hold no slot, so nothing else would.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from composer.errors import ComposerError, StudyStopped, causes, option
from composer.record import TrialRecord, lost_trial
from composer.study import _optuna
from composer.study._workers import (
    MAX_RETRIES,
    Heartbeat,
    fail_trials_of_gone_workers,
    failed_by_heartbeat,
    recover_lost_trials,
    retry_lost_trial,
)
from composer.study.experiment import StopConfig
from composer.study.fate import Fate, failure_of, fate_of

if TYPE_CHECKING:
    import optuna

    from composer.tracking.writer import StudyTracker

logger = logging.getLogger(__name__)

REPEAT_ALLOWANCE = 2
"""A study stops at ``n_trials`` distinct configurations, or at this many times ``n_trials`` trials in all
(repeats and invalid sampled combinations included), so a search space smaller than ``n_trials``, one
whose combinations are mostly invalid, or a sampler stuck on one point, still ends."""
SHARE_FROM = 10
"""Trials that must have ended before the failed share (``StopConfig.failed_share``) can stop a study: the
first failures of a young study say little about the share."""


HOLDS_A_SLOT: frozenset[Fate] = frozenset({"complete", "pruned", "running"})
"""Trials that hold one of the study's ``n_trials`` slots: distinct configurations that ran, and those
another worker is running. Waiting trials (enqueued, or a retry of a dead worker's) hold none: they are
what is left to run, so counting them would stop the study before running them."""


def distinct(trials: Sequence[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    """Trials that are not a repeat of an earlier trial's configuration (repeats are marked when they end;
    a running trial counts as distinct until then)."""
    return [t for t in trials if fate_of(t) != "repeat"]


def finished_distinct(study: optuna.Study) -> int:
    return sum(1 for t in study.get_trials(deepcopy=False) if fate_of(t) in ("complete", "pruned"))


def target_reached(
    study: optuna.Study,
    target: int,
    before: int | None = None,
    trials: Sequence[optuna.trial.FrozenTrial] | None = None,
) -> bool:
    """``target`` distinct slot-holding trials (numbered below ``before``), or the repeat allowance spent
    (by those, repeats and invalid sampled combinations); ``trials`` the study's, when already read.

    Two workers that drew one configuration at the same instant hold one slot: the later waits for the
    earlier's result (``wait_for_twin``), or, when it read the study before the earlier's configuration was
    on it, runs it too, and neither is then a repeat: two complete trials of one configuration hold one
    slot, so the study still runs ``target`` distinct configurations (a grid is not left one point short)."""
    counted = [t for t in (study.get_trials(deepcopy=False) if trials is None else trials)
               if before is None or t.number < before]
    fates = [fate_of(t) for t in counted]
    holding = len({_configuration(t) for t, f in zip(counted, fates, strict=True) if f in HOLDS_A_SLOT})
    spent = sum(1 for f in fates if f in HOLDS_A_SLOT) + sum(1 for f in fates if f in ("repeat", "invalid"))
    return holding >= target or spent >= REPEAT_ALLOWANCE * target


def _configuration(trial: optuna.trial.FrozenTrial) -> str | int:
    """What a complete trial ran (its configuration's hash); any other trial's number: a configuration
    pruned and proposed again is run again, a new slot, as in a study with one worker."""
    from optuna.trial import TrialState

    record = TrialRecord.of(trial) if trial.state == TrialState.COMPLETE else None
    return record.config_hash if record is not None else trial.number


TrialHook = Callable[["optuna.Study", "optuna.trial.FrozenTrial", "Sequence[optuna.trial.FrozenTrial]"], None]
"""Called when a trial ends with the study, the trial and the study's trials."""


def after_each_trial(
    *hooks: TrialHook,
    tracker: StudyTracker | None = None,
    untagged_after_s: float | None = None,
) -> Callable[[optuna.Study, optuna.trial.FrozenTrial], None]:
    """One Optuna callback, called once Optuna has told a trial's end: the trial, as stored, goes to the
    MLflow ``tracker`` (which reads what it produced from the artifacts file the runner spooled under its
    number), then the hooks that read the study's trials share one read of them (each read is a query of
    the storage, ~4 ms).
    With a ``tracker``, trials of workers that died meanwhile (another process of this study, on this
    machine) are failed and queued again first, so their slots are not counted as held and no worker stops
    one trial short; they, and the trials Optuna failed here for a lost heartbeat before this trial began,
    get a FAILED MLflow run."""

    def callback(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if tracker is not None:
            tracker.submit(trial)
        trials = study.get_trials(deepcopy=False)
        if tracker is not None:
            lost = fail_trials_of_gone_workers(study, trials, untagged_after_s=untagged_after_s)
            for t in lost:
                retry_lost_trial(study, t)
            stale = failed_by_heartbeat(study)
            if lost or stale:
                tracker.lost([lost_trial(t, LOST) for t in lost] + [lost_trial(t, STALE) for t in stale])
                trials = study.get_trials(deepcopy=False)
        for hook in hooks:
            hook(study, trial, trials)

    return callback


def stop_at(target: int) -> TrialHook:
    """Stop this worker once the study holds its ``target`` (see ``target_reached``)."""

    def hook(
        study: optuna.Study, trial: optuna.trial.FrozenTrial, trials: Sequence[optuna.trial.FrozenTrial]
    ) -> None:
        if target_reached(study, target, trials=trials):
            study.stop()

    return hook


class CtrlC:
    """Ctrl-C for the length of a study's optimize loop. Python raises KeyboardInterrupt wherever the signal
    lands; raised inside a finalizer (a connection's or a file's ``__del__``) it is printed and dropped,
    and the study would run on to its end. Remembered here, it stops the study when the trial ends.
    A handler other than Python's default (a host application's) is left alone."""

    def __init__(self) -> None:
        self.received = False
        self._previous: Any = None

    def __enter__(self) -> CtrlC:
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = True
        raise KeyboardInterrupt

    def hook(
        self, study: optuna.Study, trial: optuna.trial.FrozenTrial, trials: Sequence[optuna.trial.FrozenTrial]
    ) -> None:
        """A TrialHook: a Ctrl-C whose KeyboardInterrupt was dropped ends the study now."""
        if self.received:
            raise KeyboardInterrupt


LOST = f"the process running this trial died; its configuration runs again (up to {MAX_RETRIES} times)"
STALE = (
    "no heartbeat from the process running this trial for 2 x heartbeat_interval: taken for dead (killed, "
    f"suspended or cut off), its configuration runs again (up to {MAX_RETRIES} times)"
)


class Runner(Protocol):
    """What ``optimize`` runs each trial with (``composer.study.runner.TrialRunner``)."""

    trial_id: int | None
    fatal: ComposerError | None

    def __call__(self, trial: optuna.Trial) -> float | tuple[float, ...]: ...


def optimize(
    study: optuna.Study,
    runner: Runner,
    *,
    timeout: float | None,
    callback: Callable[[optuna.Study, optuna.trial.FrozenTrial], None],
    tracker: StudyTracker | None = None,
) -> None:
    """``study.optimize`` until a hook stops it or ``timeout`` passes (no trial count: repeats free their
    slot, so ``stop_at`` ends the loop). A trial of this process that another process failed meanwhile
    (taking this one for dead: a heartbeat missed while it was suspended) makes Optuna's tell fail when
    the trial ends (a ValueError, then an AssertionError from Optuna's own bookkeeping); the trial is
    queued again by the other process, so the loop goes on instead of ending in a traceback, and its
    MLflow run says FAILED, as Optuna does.

    Trials beat in daemon threads (``Heartbeat``), and a Ctrl-C that cut one off before its trial began
    leaves none beating: the process exits at once, and the trial is failed as lost later."""
    _optuna.use_heartbeat(Heartbeat)
    started = time.monotonic()
    try:
        while True:
            left = None if timeout is None else timeout - (time.monotonic() - started)
            if left is not None and left <= 0:
                return
            try:
                study.optimize(runner, timeout=left, catch=(Exception,), callbacks=[callback])
                if runner.fatal is not None:
                    raise runner.fatal
                return
            except (ValueError, AssertionError):
                lost = None if runner.trial_id is None else _optuna.get_trial(study, runner.trial_id)
                if lost is None or failure_of(lost) != "lost":
                    raise
                if tracker is not None:  # a run it may have had is closed FAILED
                    tracker.lost([lost_trial(lost, STALE)])
                logger.warning("trial #%d was failed by another process that took this one for dead; its "
                               "configuration runs again", lost.number)
    except KeyboardInterrupt:
        if tracker is not None:
            _write_interrupted(study, runner, tracker)
        raise
    except Exception as exc:
        # A Ctrl-C (or SIGTERM) landing inside Optuna's tell makes its ``finally`` raise another error
        # (UnboundLocalError) over the KeyboardInterrupt: still the user's stop, not a fault to print.
        if not _interrupted(exc):
            raise
        if tracker is not None:
            _write_interrupted(study, runner, tracker)
        raise KeyboardInterrupt from exc
    finally:
        Heartbeat.stop_left()


def _interrupted(exc: BaseException) -> bool:
    """Whether a KeyboardInterrupt is among the errors ``exc`` was raised from or while handling."""
    return any(isinstance(cause, KeyboardInterrupt) for cause in causes(exc))


INTERRUPTED = "interrupted by Ctrl-C: it takes none of n_trials; the study runs what is missing when resumed"


def _write_interrupted(study: optuna.Study, runner: Runner, tracker: StudyTracker) -> None:
    """The trial a Ctrl-C cut off is told by Optuna (FAIL, mid-trial) or was told as the signal landed in
    the callback, maybe before its run was queued: it gets its run all the same (once: ``submit`` queues a
    trial once), so every finished trial has one."""
    trial = None if runner.trial_id is None else _optuna.get_trial(study, runner.trial_id)
    if trial is None or not trial.state.is_finished():
        return
    if failure_of(trial) == "lost":
        tracker.lost([lost_trial(trial, INTERRUPTED)])
    else:
        tracker.submit(trial)


def record_lost_trials(study: optuna.Study, tracker: StudyTracker, *, untagged_after_s: float) -> None:
    """Fail the trials of dead processes now (and queue their retry), and give each lost trial a FAILED
    run: at once for a process of this machine that is gone, by heartbeat for the others."""
    recover_lost_trials(study, untagged_after_s=untagged_after_s)
    stale = {t.number for t in failed_by_heartbeat(study)}
    lost = [lost_trial(t, STALE if t.number in stale else LOST) for t in study.get_trials(deepcopy=False)
            if failure_of(t) == "lost"]
    if lost:
        tracker.lost(lost)


class FailureGuard:
    """A ``TrialHook`` that stops the study when its trials keep failing (``StopConfig``); ``reason``
    then says why, for the one error the study ends with (``raise_if_stopped``).

    Every worker of a study reads the same trials, so all of them stop. What counts: distinct trials
    that ended (complete, pruned, or failed in their pipeline), in number order.
    """

    def __init__(self, config: StopConfig) -> None:
        self.config = config
        self.reason: str | None = None

    def __call__(
        self, study: optuna.Study, trial: optuna.trial.FrozenTrial, trials: Sequence[optuna.trial.FrozenTrial]
    ) -> None:
        if self.reason is None:
            self.reason = self.check(trials)
            if self.reason is not None:
                study.stop()

    def check(self, trials: Sequence[optuna.trial.FrozenTrial]) -> str | None:
        from optuna.trial import TrialState

        ended = [t for t in trials if fate_of(t) in ("complete", "pruned", "error")]
        ended.sort(key=lambda t: t.number)
        failed = [t for t in ended if t.state == TrialState.FAIL]
        run, share = self.config.consecutive_failures, self.config.failed_share
        if run is not None and len(ended) >= run and all(t.state == TrialState.FAIL for t in ended[-run:]):
            return f"its last {run} trials failed" + _errors(ended[-run:])
        if share is not None and len(ended) >= SHARE_FROM and len(failed) > share * len(ended):
            return f"{len(failed)} of its {len(ended)} trials failed (over {share:.0%})" + _errors(failed)
        return None

    def raise_if_stopped(self, study_name: str) -> None:
        if self.reason is not None:
            raise StudyStopped(
                f"study '{study_name}' stopped: {self.reason}. Fix the cause and run the same command "
                "again: finished trials are kept, and failed ones take none of n_trials "
                f"(`composer trials` lists them; {option('debug')} shows tracebacks)"
            )


def _errors(trials: Sequence[optuna.trial.FrozenTrial]) -> str:
    """The failures' errors, most frequent kind first: "; 3 x ConnectionError: ... (trials 4, 5, 6)"."""
    kinds: dict[str, list[optuna.trial.FrozenTrial]] = {}
    for t in trials:
        record = TrialRecord.of(t)
        error = (record.error if record is not None else None) or "unknown error"
        kinds.setdefault(_cause(error), []).append(t)
    kind, group = max(kinds.items(), key=lambda item: len(item[1]))
    record = TrialRecord.of(group[-1])
    last = ((record.error if record is not None else None) or kind).splitlines()[0][:300]
    numbers = ", ".join(f"#{t.number}" for t in group[-5:])
    more = f" (and {len(kinds) - 1} other kinds of error)" if len(kinds) > 1 else ""
    return f"; {len(group)} x {last} ({numbers}){more}"


def _cause(error: str) -> str:
    """The kind of a trial's error: its type, and for a failure budget the stages whose samples failed
    (a judge whose replies cannot be parsed and a generator that cannot answer are different causes)."""
    from composer.judges.panel import FailureBudgetExceeded

    kind = error.partition(":")[0]
    if kind == FailureBudgetExceeded.__name__:
        kind = " ".join([kind, *FailureBudgetExceeded.stages_in(error)])
    return kind
