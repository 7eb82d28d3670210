"""What the MLflow writer makes a trial's run from, after Optuna has told the trial's end (as
optuna-integration's ``MLflowCallback`` does): the ``FrozenTrial`` (state, values, parameters, the pruner's
steps, the worker), its ``TrialRecord`` (read from the frozen trial: config, index, metrics, failure) and
its ``TrialArtifacts`` (what the trial produced for its artifacts and traces, which no storage keeps),
spooled by the runner under the trial's number when it finished the trial (``Spool.put_artifacts``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

    from composer.evaluation.report import EvaluationReport


@dataclass
class TrialArtifacts:
    """A trial's evaluation report (so far, for a pruned trial) and how its answers were made; a trial
    that failed before it had a report may still have what its LLM calls' errors were; one that produced
    nothing (a repeat, a trial failed unscored) has none of them."""

    report: EvaluationReport | None = None
    answerer: str = "extractive"
    judge_model: str | None = None
    generation: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per traced question: how its answer was generated (model, template, tokens, cache, failure)."""
    error_rates: Mapping[str, Any] | None = None
    """error_rates.json of a trial that failed before a report (its failure's reason joins it)."""


def frozen_to_dict(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """A frozen trial as plain values (the spool's record of it: JSON, never a pickle), read through
    Optuna's public fields: its storage's id for it is not one, and the writer has no use for it."""
    from optuna.distributions import distribution_to_json

    return {
        "number": trial.number,
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
    """``frozen_to_dict`` undone: Optuna's own FrozenTrial, with the id Optuna gives a trial made outside a
    storage (``optuna.trial.create_trial``)."""
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
        trial_id=-1,
    )
