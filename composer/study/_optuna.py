"""The few private parts of Optuna that Composer relies on, in one place.

Optuna's public API has no way to tag a trial from a sampler's ``before_trial`` (before any sampling), read a
running trial's system attributes, read every trial without a copy, fail another process's trial, reach
the storage's heartbeat-stale-trial callback, record a trial's heartbeat, or choose the thread that records
it: its own callbacks and samplers go through the storage for these, and so does Composer, here and nowhere
else. tests/study/test_optuna_adapter.py checks each against the installed Optuna, so an upgrade that moves
one fails there, by name, not deep in a study.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna
    from optuna.storages import BaseStorage
    from optuna.trial import FrozenTrial, TrialState

SUPPORTED = (4, 5)
"""Optuna major versions this adapter is tested with."""


def trial_id(trial: optuna.Trial | FrozenTrial) -> int:
    """The storage's id of a trial (not its number within the study)."""
    return int(trial._trial_id)


def system_attrs(trial: optuna.Trial) -> dict[str, Any]:
    """A running trial's system attributes (a running ``Trial`` exposes none; its storage does)."""
    return dict(trial.study._storage.get_trial_system_attrs(trial._trial_id))


def set_system_attr(study: optuna.Study, trial: optuna.Trial | FrozenTrial, key: str, value: Any) -> None:
    study._storage.set_trial_system_attr(trial._trial_id, key, value)


def all_trials(study: optuna.Study) -> list[FrozenTrial]:
    """Every trial of the study as stored now, without copies (read only)."""
    return list(study._storage.get_all_trials(study._study_id, deepcopy=False))


@dataclass
class _StartRead:
    """The trials read at the start of one trial: its storage (held weakly: a new study's storage may
    take a dead one's address), study id and trial number, and what was read."""

    storage: weakref.ref[BaseStorage] | None = None
    study_id: int = -1
    number: int = -1
    trials: list[FrozenTrial] = field(default_factory=list)


_START = _StartRead()


def trials_at_start(study: optuna.Study, number: int) -> list[FrozenTrial]:
    """Every trial of the study, read once when trial ``number`` starts and shared by what its start asks
    of them (the sampler's place or grid point, the slot claim, the repeat check; the budget reads anew):
    each read queries the storage (~4 ms at 500 trials), and a start used to make four. What another worker
    changes in the milliseconds between them is the race of two workers asking at once (a surplus trial, a
    repeat run instead of answered), which the study settles already. Read only."""
    read = _START
    if read.storage is None or read.storage() is not study._storage or (read.study_id, read.number) != (
        study._study_id, number
    ):
        read.trials = all_trials(study)
        read.storage, read.study_id, read.number = weakref.ref(study._storage), study._study_id, number
    return read.trials


def get_trial(study: optuna.Study, tid: int) -> FrozenTrial:
    return study._storage.get_trial(tid)


def set_state(study: optuna.Study, tid: int, state: TrialState) -> bool:
    """Move trial ``tid`` to ``state`` (another process's trial too); False if it had already finished."""
    return bool(study._storage.set_trial_state_values(tid, state=state))


def stale_trial_callback(study: optuna.Study) -> Callable[[optuna.Study, FrozenTrial], None] | None:
    """The callback the study's storage calls for each trial it fails for a lost heartbeat, if any."""
    from optuna.storages._heartbeat import BaseHeartbeat

    storage = study._storage
    return storage.get_heartbeat_stale_trial_callback() if isinstance(storage, BaseHeartbeat) else None


def heartbeat_interval(storage: BaseStorage) -> int:
    """Seconds between a running trial's heartbeats on ``storage``, which must have heartbeats."""
    from optuna.storages._heartbeat import BaseHeartbeat

    assert isinstance(storage, BaseHeartbeat)
    interval = storage.get_heartbeat_interval()
    assert interval is not None
    return interval


def record_heartbeat(storage: BaseStorage, tid: int) -> None:
    """Record that trial ``tid`` is alive, on a storage with heartbeats."""
    from optuna.storages._heartbeat import BaseHeartbeat

    assert isinstance(storage, BaseHeartbeat)
    storage.record_heartbeat(tid)


def use_heartbeat(beat: Callable[[int, BaseStorage], AbstractContextManager[Any]]) -> None:
    """Have ``study.optimize`` keep a running trial alive with ``beat(trial_id, storage)`` (entered around
    the trial function) instead of Optuna's ``HeartbeatThread``, on storages with a heartbeat. Process-wide
    (Optuna looks the function up in its optimize module at each trial); calling it again changes nothing."""
    from optuna.storages._heartbeat import NullHeartbeatThread, is_heartbeat_enabled
    from optuna.study import _optimize

    def heartbeat_thread(trial_id: int, storage: BaseStorage) -> Any:  # Optuna only enters and exits it
        return beat(trial_id, storage) if is_heartbeat_enabled(storage) else NullHeartbeatThread()

    _optimize.get_heartbeat_thread = heartbeat_thread
