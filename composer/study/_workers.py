"""Which process runs a trial, and whether that process is provably gone.

A worker is ``machine:pid:start``: ``machine`` is the host name, its boot id and the pid namespace (two
containers may share a host name and see their own pids; a rebooted host reuses pids), ``start`` the
process's start time in clock ticks since boot (Linux ``/proc/<pid>/stat``), so a pid the kernel has since
given to another process is not taken for the worker. A trial whose worker is on this machine, in this
pid namespace, and gone is failed (and retried) at once; any other by Optuna's heartbeat, after
``2 x heartbeat_interval``.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import warnings
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from composer.study import _optuna

if TYPE_CHECKING:
    import optuna
    from optuna.storages import BaseStorage

WORKER_ATTR = "composer.worker"
"""Trial system attribute: the worker running it, set the moment the trial exists (``tag_trial``)."""


def _start_time(pid: int) -> str:
    """The process's start time (clock ticks since boot), "" where /proc cannot tell."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # The command name (field 2) may hold spaces and parentheses: count fields after its closing one.
    return stat[stat.rindex(")") + 2 :].split()[19]


@cache
def _machine() -> str:
    """Host name, boot id and pid namespace: where a pid names one process ("" parts where unknown)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        boot = ""
    try:
        namespace = os.readlink("/proc/self/ns/pid").removeprefix("pid:")
    except OSError:
        namespace = ""
    return f"{socket.gethostname()}|{boot}|{namespace}"


def worker_id(pid: int | None = None) -> str:
    """The worker id of process ``pid`` (this process by default; a forked child has its own)."""
    pid = os.getpid() if pid is None else pid
    return f"{_machine()}:{pid}:{_start_time(pid)}"


def is_gone(worker: str) -> bool:
    """True only when ``worker`` is provably dead: it ran on this machine, in this pid namespace, and its
    process no longer exists (or the pid now belongs to a process started at another time). A worker
    of another machine, namespace or boot may be alive for all this process can see."""
    parts = worker.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != _machine() or "||" in parts[0] or not parts[1].isdigit():
        return False
    pid, start = int(parts[1]), parts[2]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, another user's
    return bool(start) and _start_time(pid) not in ("", start)


def tag_trial(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """Record ``worker`` on a trial that has just been created (from the sampler's ``before_trial``,
    before any sampling): a process killed at any later moment leaves its trial attributable."""
    # Optuna's public Trial API is not available yet at this point; its own callbacks use the storage.
    _optuna.set_system_attr(study, trial, WORKER_ATTR, worker_id())


class Heartbeat:
    """A running trial's heartbeat, recorded every ``heartbeat_interval`` seconds in a daemon thread (what
    Optuna's ``HeartbeatThread`` does, in a thread that is not a daemon, stopped only by the exit of the
    ``with`` block it starts in: a Ctrl-C landing after the start and before that block left it beating
    for ever, and the interpreter waiting for it at exit). ``stop_left`` stops the heartbeats a thread
    started and did not stop, from the ``finally`` of its study loop."""

    _beating: ClassVar[dict[int, set[Heartbeat]]] = {}
    """Heartbeats not yet stopped, by the thread that started them (a study runs in one thread)."""

    def __init__(self, trial_id: int, storage: BaseStorage) -> None:
        self.trial_id = trial_id
        self.storage = storage
        self.interval = _optuna.heartbeat_interval(storage)
        self.stopped = threading.Event()
        self.owner = threading.get_ident()
        self.thread = threading.Thread(target=self._beat, name=f"composer-heartbeat-{trial_id}", daemon=True)

    def __enter__(self) -> None:
        self._beating.setdefault(self.owner, set()).add(self)  # before it starts: no moment unlisted
        self.thread.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.thread.join()

    def stop(self) -> None:
        self.stopped.set()
        self._beating.get(self.owner, set()).discard(self)

    def _beat(self) -> None:
        while True:
            _optuna.record_heartbeat(self.storage, self.trial_id)
            if self.stopped.wait(self.interval):
                return

    @classmethod
    def stop_left(cls) -> None:
        """Stop the heartbeats this thread started whose ``with`` block never ran or never ended."""
        for beat in list(cls._beating.pop(threading.get_ident(), ())):
            beat.stop()


MAX_RETRIES = 3
"""Times a trial cut off by a dead process is run again: a configuration that kills its process every
time (out of memory, say) must not be retried forever."""


def retried_numbers(trials: Sequence[optuna.trial.FrozenTrial]) -> set[int]:
    """Numbers of the trials that were queued again (each retry lists the trials it replaces)."""
    return {n for t in trials for n in t.system_attrs.get("retry_history", ())}


def retry_lost_trial(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """Queue a trial cut off by a dead process to run again, with the same parameters (Optuna's
    ``RetryFailedTrialCallback``, without the dead worker's tag and its half-written record). A trial cut
    off while its parameters were drawn is not (unless a grid point fixes them): the sampler draws them
    again, all of them, in its place (``place_in_study``), where a retry would fix the ones drawn and
    draw the others anew."""
    import optuna

    from composer.record import TrialRecord
    from composer.study.fate import GRID_ID

    history = [*trial.system_attrs.get("retry_history", []), trial.number]
    drawn = TrialRecord.of(trial) is not None or GRID_ID in trial.system_attrs
    if len(history) > MAX_RETRIES or not drawn:
        return
    attrs = {k: v for k, v in trial.system_attrs.items() if k != WORKER_ATTR}
    attrs.update(failed_trial=attrs.get("failed_trial", trial.number), retry_history=history)
    study.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.WAITING,
            params=trial.params,
            distributions=trial.distributions,
            system_attrs=attrs,
        )
    )


class StaleTrials:
    """The storage's heartbeat-stale-trial callback: queues a retry of each trial this process fails for a
    lost heartbeat (``retry_lost_trial``) and keeps the trial until ``failed_by_heartbeat`` takes it, for
    the study to give it a FAILED MLflow run. Optuna calls it in the one process whose update failed the
    trial, so each such trial gets one run, whichever worker noticed."""

    def __init__(self) -> None:
        self.failed: list[optuna.trial.FrozenTrial] = []

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        retry_lost_trial(study, trial)
        self.failed.append(trial)


def failed_by_heartbeat(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """The trials this process failed for a lost heartbeat since the last call (each given once)."""
    callback = _optuna.stale_trial_callback(study)
    if not isinstance(callback, StaleTrials):
        return []
    taken, callback.failed = callback.failed, []
    return taken


def fail_trials_of_gone_workers(
    study: optuna.Study,
    trials: Sequence[optuna.trial.FrozenTrial] | None = None,
    *,
    untagged_after_s: float | None = None,
) -> list[optuna.trial.FrozenTrial]:
    """Fail the running trials whose worker ``is_gone``, at once, and (with ``untagged_after_s``) those
    running that long without a worker: a process killed between Optuna creating a trial and tagging it
    leaves no heartbeat either, so nothing else would ever fail it. The trials failed here, as they are
    now; several processes doing this together fail each trial once, the storage refusing the second."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    now = datetime.now()
    failed = []
    for trial in study.get_trials(deepcopy=False) if trials is None else trials:
        if trial.state != TrialState.RUNNING:
            continue
        worker = trial.system_attrs.get(WORKER_ATTR)
        if isinstance(worker, str):
            if not is_gone(worker):
                continue
        elif untagged_after_s is None or trial.datetime_start is None or (
            (now - trial.datetime_start).total_seconds() < untagged_after_s
        ):
            continue
        try:
            if _optuna.set_state(study, _optuna.trial_id(trial), TrialState.FAIL):
                failed.append(_optuna.trial_id(trial))
        except UpdateFinishedTrialError:
            continue
    return [_optuna.get_trial(study, trial_id) for trial_id in failed]


def recover_lost_trials(study: optuna.Study, *, untagged_after_s: float | None = None) -> None:
    """Fail the trials of dead processes (at once for this machine's, by heartbeat for the others) and
    queue a retry of every lost trial that has none: also of one whose retry a process killed in between
    never queued, so a study killed at any moment loses no trial."""
    import optuna

    from composer.study.fate import failure_of

    fail_trials_of_gone_workers(study, untagged_after_s=untagged_after_s)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)  # its callback (StaleTrials) queues their retries
    trials = study.get_trials(deepcopy=False)
    retried = retried_numbers(trials)
    for trial in trials:
        if trial.number not in retried and failure_of(trial) == "lost":
            retry_lost_trial(study, trial)


def twin_retry(study: optuna.Study, number: int, system_attrs: dict[str, object]) -> int | None:
    """The earlier trial that is the same retry as trial ``number`` (queued twice by two processes that
    recovered the same lost trial at once), if it has not itself been cut off; None for a first retry."""
    from composer.study.fate import failure_of

    history = system_attrs.get("retry_history")
    if not history:
        return None
    for trial in study.get_trials(deepcopy=False):
        if (
            trial.number < number
            and trial.system_attrs.get("retry_history") == history
            and failure_of(trial) not in ("lost", "surplus")
        ):
            return trial.number
    return None


TWIN_POLL_S = 0.5
"""How often a trial waiting for its twin (``wait_for_twin``) looks whether the twin has ended."""


def earlier_twin(
    trials: Sequence[optuna.trial.FrozenTrial], number: int, digest: str
) -> optuna.trial.FrozenTrial | None:
    """The running trial of configuration ``digest`` that began before trial ``number``: two workers drew
    one configuration at once (a grid point taken by both in the same instant, a sampler proposing it
    twice, a retry and a fresh draw). The one started first runs it; a tie goes to the lower number, so
    two twins never wait for each other."""
    from optuna.trial import TrialState

    from composer.record import TrialRecord

    mine = next((t for t in trials if t.number == number), None)
    if mine is None or mine.datetime_start is None:
        return None
    for t in trials:
        if t.state != TrialState.RUNNING or t.number == number or t.datetime_start is None:
            continue
        record = TrialRecord.of(t)
        if (record is not None and record.config_hash == digest
                and (t.datetime_start, t.number) < (mine.datetime_start, number)):
            return t
    return None


def wait_for_twin(
    study: optuna.Study, number: int, digest: str, at_start: Sequence[optuna.trial.FrozenTrial]
) -> bool:
    """Wait while an ``earlier_twin`` of trial ``number`` runs, so the trial answers from its result rather
    than pay for the configuration twice; True if it waited. A twin cut off by a dead process ends the wait
    (its lost trial is failed here: a waiting worker reaches no trial end that would find it), and the
    trial then runs the configuration itself. ``at_start``, the trials read when trial ``number`` started:
    a twin was running then, so a study with no other trial running then (one worker) reads nothing more."""
    from optuna.trial import TrialState

    mine = next((t for t in at_start if t.number == number), None)
    started = mine.datetime_start if mine is not None else None
    if started is None or not any(
        t.state == TrialState.RUNNING and t.number != number and t.datetime_start is not None
        and t.datetime_start <= started
        for t in at_start
    ):
        return False
    waited = False
    while earlier_twin(_optuna.all_trials(study), number, digest) is not None:
        waited = True
        time.sleep(TWIN_POLL_S)
        recover_lost_trials(study)
    return waited
