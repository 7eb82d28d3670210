"""A question generation as an MLflow run: settings as params, counts as metrics, the report as a file."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from composer.llm.spend import purpose_metrics
from composer.metrics.names import mlflow_metric_name
from composer.tracking.setup import mlflow_params


def log_report_to_mlflow(
    report: Mapping[str, Any], tracking_uri: str, experiment: str, *, questions: Path | None = None
) -> str:
    """Log one finished generation as a run named ``synth-<seed>`` in ``experiment``; returns its run id."""
    from mlflow.entities import Metric

    from composer.tracking.evaluation import open_experiment

    client, found = open_experiment(tracking_uri, experiment)
    settings = report["settings"]
    run = client.create_run(found, run_name=f"synth-{settings['seed']}", tags={"composer.kind": "synth"})
    counts: dict[str, Any] = {
        "kept": report["kept"],
        "generated": report["generated"],
        "shortfall": report["shortfall"],
        "seconds": report["seconds"],
        **report["llm"],
        **purpose_metrics(report.get("llm_by_purpose") or {}),
        **{f"kept_{k}": v["kept"] for k, v in report["by_kind"].items()},
        **{f"dropped_{r}": n for r, n in report["dropped"].items()},
    }
    now = int(time.time() * 1000)
    params = {**settings, "corpus_fingerprint": report["corpus"]["fingerprint"]}
    client.log_batch(
        run.info.run_id,
        metrics=[Metric(mlflow_metric_name(k), float(v), now, 0) for k, v in counts.items()],
        params=mlflow_params(params),
    )
    client.log_dict(run.info.run_id, dict(report), "synth_report.json")
    if questions is not None:
        client.log_artifact(run.info.run_id, str(questions))
    client.set_terminated(run.info.run_id)
    return str(run.info.run_id)
