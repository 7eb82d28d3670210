"""What became of a trial (``fate_of``), read from its Optuna state and its record: every count of a study
is made from it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from composer.record import FailureKind, TrialRecord

if TYPE_CHECKING:
    import optuna

GRID_ID = "composer.grid_id"
"""Trial system attribute: the index of the trial's configuration in the study's grid."""

Fate = Literal[
    "complete", "pruned", "repeat", "running", "waiting", "error", "invalid", "surplus", "budget", "lost"
]
"""What became of a trial: ``complete`` and ``pruned`` hold one of ``n_trials`` (a distinct configuration
that ran); ``repeat`` answered from an earlier trial (holds none); ``running`` holds one until it ends,
``waiting`` (queued, or a retry) none yet; ``error`` (its pipeline raised) counts toward the stop rules;
``budget`` (stopped when the study's LLM budget ran out) holds none and is never counted complete;
``invalid`` (sampled values that make no configuration) spends the repeat allowance only; ``surplus``
(started after other workers took the last slot) and ``lost`` (its process died; run again) say nothing
about the pipeline."""


def fate_of(trial: optuna.trial.FrozenTrial) -> Fate:
    from optuna.trial import TrialState

    record = TrialRecord.of(trial)
    if trial.state == TrialState.FAIL:
        return "lost" if record is None or record.failure is None else record.failure
    if trial.state == TrialState.RUNNING:
        return "running"
    if trial.state == TrialState.WAITING:
        return "waiting"
    if record is not None and record.duplicate_of is not None:
        return "repeat"
    return "pruned" if trial.state == TrialState.PRUNED else "complete"


def failure_of(trial: optuna.trial.FrozenTrial) -> FailureKind | Literal["lost"] | None:
    """Why a failed trial failed (see ``TrialRecord.failure``), "lost" when its process died; None for
    a trial that did not fail."""
    fate = fate_of(trial)
    return fate if fate in ("error", "invalid", "surplus", "budget", "lost") else None
