"""What Composer records of a trial, typed: ``TrialRecord`` on the Optuna trial, ``TrialLog`` for MLflow.

Optuna keeps a trial's parameters, state and values; the rest (the pipeline config, its metrics, the
index it used, why it failed or where it was pruned, what it repeats, its LLM spending) is one
``TrialRecord`` stored as the trial's ``composer`` user attribute, read back with ``TrialRecord.of``, as
Optuna's ``FrozenTrial`` reads its own columns. ``TrialLog``, what the MLflow writer receives when a
trial ends, lives with that writer (``composer.tracking.trial``) and is re-exported here.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from composer.tracking.trial import TrialLog as TrialLog

if TYPE_CHECKING:
    import optuna


FailureKind = Literal["error", "invalid", "surplus"]

GRID_ID = "composer.grid_id"
"""Trial system attribute: the index of the trial's configuration in the study's grid."""
RECORD_ATTR = "composer"
"""The trial user attribute holding its TrialRecord."""
SCHEMA = 2
"""Bumped when TrialRecord changes incompatibly: a study recorded with another schema is not resumed."""
PARSED_RECORDS = 8192
"""Stored records kept parsed (``TrialRecord.of``): the study's bookkeeping reads every trial's record
after every trial, which parsed anew cost a 484-trial grid ~7 s (quadratic in the trials)."""
_PARSED: OrderedDict[int, tuple[Mapping[str, Any], TrialRecord]] = OrderedDict()


@dataclass(frozen=True)
class IndexUse:
    """The index a trial searched: its key, size, whether it was built or reused, what encoding cost."""

    key: str
    n_chunks: int
    reused: bool
    embeddings_computed: int
    embeddings_reused: int
    seconds: float


@dataclass(frozen=True)
class PrunedAt:
    step: int
    questions: int


@dataclass(frozen=True)
class TrialRecord:
    """A trial as Composer knows it. ``metrics`` holds a complete trial's every metric and ``composite``;
    a pruned trial's hold ``composite_at_prune`` and where it stopped (``pruned_at``) instead."""

    config: Mapping[str, Any]
    config_hash: str
    worker: str | None = None
    index: IndexUse | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    pruned_at: PrunedAt | None = None
    duplicate_of: int | None = None
    error: str | None = None
    failure: FailureKind | None = None
    """Why a failed trial failed: its pipeline raised ("error"), its sampled values do not make a valid
    configuration ("invalid"), or it started after other workers had taken the study's last slot
    ("surplus"). A failed trial without one was cut off by the death of its process."""
    llm_usage: Mapping[str, float] = field(default_factory=dict)
    seconds: Mapping[str, float] = field(default_factory=dict)
    """Where the trial's time went: index, search, fusion, answer, judge, metrics, steps."""

    @property
    def composite(self) -> float | None:
        value = self.metrics.get("composite")
        return None if value is None else float(value)

    def to_dict(self) -> dict[str, Any]:
        """The stored form: the config scrubbed of credentials (a study storage is no place for them;
        the trial's parameters rebuild the real config)."""
        from composer.redact import scrub, scrub_url

        error = None if self.error is None else scrub_url(self.error)
        return {"schema": SCHEMA, **asdict(self), "config": scrub(self.config), "error": error}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrialRecord:
        index, pruned = data.get("index"), data.get("pruned_at")
        return cls(
            config=dict(data["config"]),
            config_hash=str(data["config_hash"]),
            worker=data.get("worker"),
            index=IndexUse(**index) if index else None,
            metrics=dict(data.get("metrics") or {}),
            pruned_at=PrunedAt(**pruned) if pruned else None,
            duplicate_of=data.get("duplicate_of"),
            error=data.get("error"),
            failure=data.get("failure") or ("error" if data.get("error") else None),
            llm_usage=dict(data.get("llm_usage") or {}),
            seconds=dict(data.get("seconds") or {}),
        )

    @classmethod
    def of(cls, trial: optuna.trial.FrozenTrial | optuna.Trial) -> TrialRecord | None:
        """The record of a trial (finished, or running in this process), None for one that never got as
        far as a configuration."""
        data = trial.user_attrs.get(RECORD_ATTR)
        if not isinstance(data, Mapping):
            return None
        # A finished trial's stored attribute is one object for the storage cache's life, never changed
        # in place (a new record replaces it): parsed once, keyed by identity. The entry holds the object,
        # so its id cannot be reused while the entry lives.
        found = _PARSED.get(id(data))
        if found is not None and found[0] is data:
            _PARSED.move_to_end(id(data))
            return found[1]
        record = cls.from_dict(data)
        _PARSED[id(data)] = (data, record)
        if len(_PARSED) > PARSED_RECORDS:
            _PARSED.popitem(last=False)
        return record

    def save(self, trial: optuna.Trial) -> None:
        trial.set_user_attr(RECORD_ATTR, self.to_dict())

    def updated(self, **changes: Any) -> TrialRecord:
        return replace(self, **changes)


def failure_of(trial: optuna.trial.FrozenTrial) -> FailureKind | Literal["lost"] | None:
    """Why a failed trial failed (see ``TrialRecord.failure``), "lost" when its process died; None for
    a trial that did not fail."""
    fate = fate_of(trial)
    return fate if fate in ("error", "invalid", "surplus", "lost") else None


Fate = Literal["complete", "pruned", "repeat", "running", "waiting", "error", "invalid", "surplus", "lost"]
"""What became of a trial, the one reading every count of a study is made from: ``complete`` and
``pruned`` hold one of ``n_trials`` (a distinct configuration that ran); ``repeat`` answered from an earlier
trial (holds none); ``running`` holds one until it ends, ``waiting`` (queued, or a retry) none yet; ``error``
(its pipeline raised) counts toward the stop rules; ``invalid`` (sampled values that make no
configuration) spends the repeat allowance only; ``surplus`` (started after other workers took the last
slot) and ``lost`` (its process died; run again) say nothing about the pipeline."""


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
