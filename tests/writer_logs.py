"""What the MLflow writer's tests log: a small chunk table, an ended trial with its artifacts, spooled as a
study spools them, the writer's settings in a temporary folder, and the trial runs read back (shared by
tests/tracking and tests/cli)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from ended_trials import ended_trial
from optuna.trial import FrozenTrial

from composer.data.ranking import ChunkTable, Ranking
from composer.evaluation.report import EvaluationReport, SampleTable
from composer.tracking.spool import Spool
from composer.tracking.trial import TrialArtifacts
from composer.tracking.trial_run import RunWriter
from composer.tracking.writer import StudyTracker, WriterSettings

TABLE = ChunkTable(
    ("a#0", "b#0", "c#0"), ("a", "b", "c"), ("alpha text", "beta text", "gamma text"), key="composer-test"
)


def trial_log(number: int, state: str = "COMPLETE") -> tuple[FrozenTrial, TrialArtifacts]:
    ranking = Ranking(("q1", "q2"), np.array([[0, 1], [2, -1]]), np.array([[0.9, 0.5], [0.7, 0.0]]), TABLE)
    table = SampleTable(
        ("q1", "q2"), ("first?", "second?"), metrics={"recall@1": np.array([1.0, 0.0])}, retrieved=ranking
    )
    return ended_trial(number, {"retrieval": {"mode": "bm25", "k": 2}}, state, metrics={"composite": 0.5},
                       report=EvaluationReport(table, (1,), "document"))


def spool_trial(spool: Spool, trial: FrozenTrial, artifacts: TrialArtifacts) -> Path:
    """Spool an ended trial as a study does: its artifacts under its number (the runner), then its record."""
    spool.put_artifacts(trial.number, artifacts)
    return spool.put("trial", trial)


def submit(tracker: StudyTracker, trial: FrozenTrial, artifacts: TrialArtifacts) -> None:
    """Hand an ended trial to the MLflow writer as a study does: its artifacts spooled first (the runner)."""
    tracker.spool.put_artifacts(trial.number, artifacts)
    tracker.submit(trial)


def settings(tmp_path: Path, **options: Any) -> WriterSettings:
    return WriterSettings(
        f"sqlite:///{tmp_path / 'mlflow.db'}",
        "writer",
        "s",
        spool=tmp_path / "spool" / "s",
        storage=f"sqlite:///{tmp_path / 'optuna.db'}",
        artifact_root=tmp_path / "artifacts",
        **options,
    )


def writer_for(tmp_path: Path) -> RunWriter:
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    return RunWriter(f"sqlite:///{tmp_path / 'mlflow.db'}", "writer", "s", storage=storage)


def runs_by_trial(tmp_path: Path) -> dict[int, Any]:
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("writer")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.`composer.role` = 'trial'")
    numbers = [int(r.data.tags["composer.trial"]) for r in runs]
    assert len(numbers) == len(set(numbers)), "one run per trial"
    return {int(r.data.tags["composer.trial"]): r for r in runs}
