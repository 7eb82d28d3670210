"""The generation report as an MLflow run: settings as params, counts as metrics, the report as a file."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from composer.errors import InputError
from composer.redact import flatten
from composer.store import sqlite_file


def log_report_to_mlflow(
    report: Mapping[str, Any], tracking_uri: str, experiment: str, *, questions: Path | None = None
) -> str:
    """Log one finished generation as a run named ``synth-<seed>`` in ``experiment``; returns its run id."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param
    from mlflow.exceptions import MlflowException

    if (file := sqlite_file(tracking_uri)) is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
    try:
        client = MlflowClient(tracking_uri)
        found = client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found is not None else client.create_experiment(experiment)
    except MlflowException as exc:
        raise InputError(
            f"cannot use the MLflow store: {' '.join(str(exc.message).split())[:300]}", field="tracking_uri"
        ) from None
    settings = report["settings"]
    run = client.create_run(
        experiment_id, run_name=f"synth-{settings['seed']}", tags={"composer.kind": "synth"}
    )
    counts: dict[str, Any] = {
        "kept": report["kept"],
        "generated": report["generated"],
        "shortfall": report["shortfall"],
        "seconds": report["seconds"],
        **report["llm"],
        **{f"kept_{k}": v["kept"] for k, v in report["by_kind"].items()},
        **{f"dropped_{r}": n for r, n in report["dropped"].items()},
    }
    now = int(time.time() * 1000)
    params = {**flatten(settings), "corpus_fingerprint": report["corpus"]["fingerprint"]}
    client.log_batch(
        run.info.run_id,
        metrics=[Metric(k, float(v), now, 0) for k, v in counts.items()],
        params=[Param(k, str(v)[:6000]) for k, v in params.items()],
    )
    client.log_dict(run.info.run_id, dict(report), "synth_report.json")
    if questions is not None:
        client.log_artifact(run.info.run_id, str(questions))
    client.set_terminated(run.info.run_id)
    return str(run.info.run_id)
