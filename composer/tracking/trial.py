"""What the MLflow writer makes a trial's run from, after Optuna has told the trial's end (as
optuna-integration's ``MLflowCallback`` does): the ``FrozenTrial`` (state, values, parameters, the pruner's
steps, the worker), its ``TrialRecord`` (read from the frozen trial: config, index, metrics, failure) and
its ``TrialReport`` (what the trial produced for its artifacts and traces, which no storage keeps).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from composer.record import TrialRecord

if TYPE_CHECKING:
    import optuna

    from composer.evaluation.report import EvaluationReport


@dataclass
class TrialReport:
    """A trial's evaluation report (so far, for a pruned trial) and how its answers were made; a trial
    that failed before it had a report may still have what its LLM calls' errors were."""

    report: EvaluationReport | None = None
    answerer: str = "extractive"
    judge: str | None = None
    generation: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per traced question: how its answer was generated (model, template, tokens, cache, failure)."""
    error_rates: Mapping[str, Any] | None = None
    """error_rates.json of a trial that failed before a report (its failure's reason joins it)."""


def trial_config(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """The trial's pipeline config (credentials masked) or, for one that never had one, its parameters."""
    record = TrialRecord.of(trial)
    return dict(record.config) if record is not None and record.config else dict(trial.params)


def frozen_to_dict(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """A frozen trial as plain values (the spool's record of it: JSON, never a pickle)."""
    from optuna.distributions import distribution_to_json

    return {
        "number": trial.number,
        "trial_id": trial._trial_id,
        "state": trial.state.name,
        "values": None if trial.values is None else list(trial.values),
        "datetime_start": trial.datetime_start,
        "datetime_complete": trial.datetime_complete,
        "params": dict(trial.params),
        "distributions": {k: distribution_to_json(d) for k, d in trial.distributions.items()},
        "user_attrs": dict(trial.user_attrs),
        "system_attrs": dict(trial.system_attrs),
        "intermediate_values": dict(trial.intermediate_values),
    }


def frozen_from_dict(data: Mapping[str, Any]) -> optuna.trial.FrozenTrial:
    """``frozen_to_dict`` undone: Optuna's own FrozenTrial."""
    from optuna.distributions import json_to_distribution
    from optuna.trial import FrozenTrial, TrialState

    values = data["values"]
    return FrozenTrial(
        number=int(data["number"]),
        state=TrialState[str(data["state"])],
        value=None,
        values=None if values is None else [float(v) for v in values],
        datetime_start=data["datetime_start"],
        datetime_complete=data["datetime_complete"],
        params=dict(data["params"]),
        distributions={k: json_to_distribution(v) for k, v in data["distributions"].items()},
        user_attrs=dict(data["user_attrs"]),
        system_attrs=dict(data["system_attrs"]),
        intermediate_values={int(k): float(v) for k, v in data["intermediate_values"].items()},
        trial_id=int(data["trial_id"]),
    )
