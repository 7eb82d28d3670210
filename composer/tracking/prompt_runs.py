"""A prompt optimization in MLflow: one run for the optimization (nested under the study's run when
there is one) holding the verdict, and one child run per candidate with its text (``prompt.yaml``), its
scores and its parent candidate, so the MLflow UI shows how the prompt evolved.

It reads the optimization as plain data (``PromptOptimization.to_dict``): tracking sits below the
optimizer in the package order, as it sits below the study whose spooled records it writes.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer.metrics.names import mlflow_metric_name
from composer.tracking.evaluation import open_experiment
from composer.tracking.read import ROLE_TAG, STUDY_TAG
from composer.tracking.setup import mlflow_params
from composer.yamlfile import dump_yaml

if TYPE_CHECKING:
    from mlflow import MlflowClient

PARENT_CANDIDATE_TAG = "composer.parent_candidate"
"""A candidate run's tag: the index of the candidate it was proposed from (none on the seed)."""


@dataclass(frozen=True)
class PromptRunTarget:
    """Where an optimization's runs go: the store, the MLflow experiment, and the study's run (if any)
    they nest under."""

    tracking_uri: str
    experiment: str
    parent_run_id: str | None = None


def log_prompt_optimization(optimization: Mapping[str, Any], target: PromptRunTarget) -> str:
    """Log a finished optimization (``PromptOptimization.to_dict``) and its candidates; returns the
    optimization run's id."""
    from mlflow.entities import Metric

    client, experiment = open_experiment(target.tracking_uri, target.experiment)
    tags = {ROLE_TAG: "prompt_optimization", STUDY_TAG: str(optimization["study"])}
    if target.parent_run_id:
        tags["mlflow.parentRunId"] = target.parent_run_id
    verdict = optimization.get("verdict")
    if verdict:
        tags["composer.verdict"] = str(verdict["outcome"])
    if optimization.get("registered"):
        tags["composer.registered"] = str(optimization["registered"])
    run = client.create_run(experiment, run_name=f"prompt: {optimization['study']}", tags=tags)
    run_id = str(run.info.run_id)
    now = int(time.time() * 1000)
    metrics = {f"requests_{p}": float(n) for p, n in optimization["requests"].items()}
    metrics.update(candidates=len(optimization["candidates"]), discarded=optimization["discarded"],
                   seconds=optimization["seconds"])
    if verdict:
        metrics.update(held_out_seed=verdict["seed_score"], held_out_best=verdict["best_score"],
                       held_out_difference=verdict["difference"], held_out_ci_low=verdict["ci"][0],
                       held_out_ci_high=verdict["ci"][1])
    params = {"seed_candidate": optimization["seed"], "best_candidate": optimization["best"],
              "pareto": optimization["pareto"], "reason": optimization["reason"], "key": optimization["key"]}
    client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()],
                     params=mlflow_params(params))
    for candidate in optimization["candidates"]:
        _log_candidate(client, experiment, run_id, candidate, now)
    client.set_terminated(run_id)
    return run_id


def _log_candidate(client: MlflowClient, experiment: str, parent_run_id: str, candidate: Mapping[str, Any],
                   now: int) -> None:
    from mlflow.entities import Metric

    parent = candidate["parent"]
    tags = {ROLE_TAG: "prompt_candidate", "mlflow.parentRunId": parent_run_id}
    if parent is not None:
        tags[PARENT_CANDIDATE_TAG] = str(parent)
    run = client.create_run(experiment, run_name=f"candidate {candidate['index']}", tags=tags)
    run_id = str(run.info.run_id)
    metrics = {"selection_score": candidate["selection_score"],
               "scored_questions": candidate["scored_questions"],
               **{mlflow_metric_name(k): v for k, v in candidate["metrics"].items()}}
    params = {"candidate": candidate["index"], "parent_candidate": "seed" if parent is None else parent,
              "kept": candidate["kept"]}
    client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()],
                     params=mlflow_params(params))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "prompt.yaml"
        path.write_text(dump_yaml(candidate["prompt"]), encoding="utf-8")
        client.log_artifact(run_id, str(path))
    client.set_terminated(run_id)
