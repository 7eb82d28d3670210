"""An evaluation (``composer.evaluate(..., mlflow=...)``) as one MLflow run: its means as metrics, the
report's files as artifacts."""

from __future__ import annotations

import tempfile
import time
from typing import TYPE_CHECKING

from composer.errors import InputError
from composer.metrics.names import mlflow_metric_name
from composer.mlflow_store import prepare_mlflow_store
from composer.redact import scrub_url
from composer.store import sqlite_file
from composer.tracking.setup import experiment_id, mlflow_params

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from composer.evaluation.report import EvaluationReport


def open_experiment(tracking_uri: str, experiment: str) -> tuple[MlflowClient, str]:
    """A client of the store and the id of ``experiment`` in it (created if new); a store that cannot be
    used is one located error line, not MLflow's traceback."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from composer.tracking.setup import local_store_lock

    if (file := sqlite_file(tracking_uri)) is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
    try:
        with local_store_lock(tracking_uri):  # a new store is made whole or not at all (see mlflow_store)
            prepare_mlflow_store(tracking_uri)
        client = MlflowClient(tracking_uri)
        return client, experiment_id(client, experiment)
    except MlflowException as exc:
        reason = scrub_url(" ".join(str(exc.message).split()))[:300]
        raise InputError(f"cannot use the MLflow store: {reason}", field="tracking_uri") from None


def log_evaluation(
    report: EvaluationReport, tracking_uri: str, experiment: str, *, run_name: str | None = None
) -> str:
    """Log ``report`` as a finished run of ``experiment``; returns the run id."""
    from mlflow.entities import Metric

    client, found = open_experiment(tracking_uri, experiment)
    run = client.create_run(found, run_name=run_name, tags={"composer.kind": "evaluate"})
    run_id = str(run.info.run_id)
    now = int(time.time() * 1000)
    means = {**report.means(), **report.breakdown_means()}  # by turn too, for a conversational set
    metrics = [Metric(mlflow_metric_name(k), float(v), now, 0) for k, v in means.items()]
    summary = report.summary()
    params = {
        "n_questions": summary.get("n_questions"),
        "match": summary.get("match"),
        **{k: v for k, v in report.meta.items() if k in ("system", "questions", "corpus", "index")},
    }
    client.log_batch(run_id, metrics=metrics, params=mlflow_params(params))
    with tempfile.TemporaryDirectory() as folder:
        report.save(folder)
        client.log_artifacts(run_id, folder)
    client.set_terminated(run_id)
    return run_id
