"""``TrialRecord``: what Composer keeps of a trial beyond what Optuna's ``FrozenTrial`` holds.

Optuna keeps a trial's number, parameters, state, values, intermediate values (the pruner's steps, one per
batch of questions) and system attributes (its worker). The rest (the pipeline config and its hash, the
index it searched, its metrics, what it repeats, why it failed, its LLM spending and where its time went)
is one ``TrialRecord`` stored as the trial's ``composer`` user attribute and read back with
``TrialRecord.of``, as Optuna reads its own columns. The study writes it (``composer.study``), the MLflow
writer reads it from the frozen trial it is handed (``composer.tracking``): so it lives with neither.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from composer.index.base import IndexInfo

if TYPE_CHECKING:
    import optuna


FailureKind = Literal["error", "invalid", "surplus", "budget"]

RECORD_ATTR = "composer"
"""The trial user attribute holding its TrialRecord."""
LOST_ATTR = "composer_lost"
"""The user attribute saying why a lost trial is taken for dead, on the copy of its frozen trial handed to
the MLflow writer (``lost_trial``): Optuna keeps a finished trial's attributes as they were when told."""
SCHEMA = 2
"""Bumped when TrialRecord changes incompatibly: a study recorded with another schema is not resumed.
(Fields a record of this schema once had, ``worker`` and ``pruned_at``, are read from Optuna now and
ignored where stored.)"""
PARSED_RECORDS = 8192
"""Stored records kept parsed (``TrialRecord.of``): the study's bookkeeping reads every trial's record
after every trial, which parsed anew cost a 484-trial grid ~7 s (quadratic in the trials)."""
_PARSED: OrderedDict[int, tuple[Mapping[str, Any], TrialRecord]] = OrderedDict()


@dataclass(frozen=True)
class TrialRecord:
    """A trial as Composer knows it. ``metrics`` holds a complete trial's every metric and ``composite``;
    a pruned trial's its composite so far (``composite_at_prune``) and the questions it had scored
    (``pruned_at_questions``); where it stopped is its last intermediate value's step."""

    config: Mapping[str, Any]
    config_hash: str
    index: IndexInfo | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    duplicate_of: int | None = None
    error: str | None = None
    failure: FailureKind | None = None
    """Why a failed trial failed: its pipeline raised ("error"), its sampled values do not make a valid
    configuration ("invalid"), or it started after other workers had taken the study's last slot
    ("surplus"), or the study's LLM budget ran out while it ran ("budget"). A failed trial without one
    was cut off by the death of its process."""
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
        index = data.get("index")
        if index and "n_documents" not in index:  # stored before the record kept the index's own facts
            index = {**index, "n_documents": 0}
        return cls(
            config=dict(data["config"]),
            config_hash=str(data["config_hash"]),
            index=IndexInfo(**index) if index else None,
            metrics=dict(data.get("metrics") or {}),
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


def lost_trial(trial: optuna.trial.FrozenTrial, reason: str) -> optuna.trial.FrozenTrial:
    """A copy of a lost trial's frozen trial that says why it is taken for dead (``LOST_ATTR``): a lost trial
    crosses into tracking as its frozen trial alone, as every trial does."""
    copied = copy.deepcopy(trial)
    copied.set_user_attr(LOST_ATTR, reason)
    return copied
