"""The few private parts of Optuna that Composer relies on, in one place.

Optuna's public API has no way to tag a trial from a sampler's ``before_trial`` (before any sampling), read a
running trial's system attributes, read every trial without a copy, or fail another process's trial: its
own callbacks and samplers go through the storage for these, and so does Composer, here and nowhere else.
``tests/test_optuna_adapter.py`` checks each against the installed Optuna, so an upgrade that moves one
fails there, by name, not deep in a study.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna
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


def get_trial(study: optuna.Study, tid: int) -> FrozenTrial:
    return study._storage.get_trial(tid)


def set_state(study: optuna.Study, tid: int, state: TrialState) -> bool:
    """Move trial ``tid`` to ``state`` (another process's trial too); False if it had already finished."""
    return bool(study._storage.set_trial_state_values(tid, state=state))
