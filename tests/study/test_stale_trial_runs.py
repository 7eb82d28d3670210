"""A trial Optuna fails for a lost heartbeat (its worker suspended, say, then resumed) gets a FAILED MLflow
run with the reason, from the worker that failed it; the resumed worker's own run of it says FAILED too."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import optuna
from ended_trials import scripted_runner

from composer.record import LOST_ATTR
from composer.study import _optimize, _optuna
from composer.study._storage import make_storage
from composer.study._workers import WORKER_ATTR
from composer.tracking.writer import StudyTracker, WriterSettings

ELSEWHERE = "another-host|boot|ns:4242:1"
"""A worker on another machine: alive for all this process can tell, so only its heartbeat can fail it."""


def test_a_trial_failed_for_a_lost_heartbeat_mid_study_gets_a_failed_mlflow_run(tmp_path: Path) -> None:
    from mlflow import MlflowClient

    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(storage=make_storage(url, heartbeat_interval=1), study_name="s")
    tracker = StudyTracker(WriterSettings(
        f"sqlite:///{tmp_path / 'mlflow.db'}", "stale", "s", spool=tmp_path / "spool" / "s", storage=url,
        artifact_root=tmp_path / "artifacts",
    ))
    tracker.ready()
    stalled: list[int] = []

    def run(trial: optuna.Trial) -> float:
        if trial.number == 0:  # another worker's trial, its last heartbeat an hour old: it was suspended
            other = study.ask()
            _optuna.set_system_attr(study, other, WORKER_ATTR, ELSEWHERE)
            study._storage.record_heartbeat(_optuna.trial_id(other))  # type: ignore[attr-defined]
            with sqlite3.connect(tmp_path / "optuna.db") as db:
                db.execute("UPDATE trial_heartbeats SET heartbeat = datetime(heartbeat, '-1 hour')")
            stalled.append(other.number)
        return 1.0

    def enough(study: optuna.Study, trial: optuna.trial.FrozenTrial, trials: Any) -> None:
        if trial.number >= 2:
            study.stop()

    callback = _optimize.after_each_trial(enough, tracker=tracker, untagged_after_s=600)
    objective = scripted_runner(run, None, tracker.spool)
    try:
        _optimize.optimize(study, objective, timeout=60, callback=callback, tracker=tracker)
    finally:
        tracker.close("FINISHED")

    [number] = stalled
    assert study.trials[number].state == optuna.trial.TrialState.FAIL  # failed by this worker's Optuna
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("stale")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.`composer.role` = 'trial'")
    [stale] = [r for r in runs if r.data.tags["composer.trial"] == str(number)]
    assert stale.info.status == "FAILED"
    assert "no heartbeat from the process running this trial" in stale.data.tags["composer.error"]


def test_a_resumed_worker_whose_trial_was_failed_meanwhile_closes_its_run_failed() -> None:
    """Suspended past its heartbeat, the worker resumes and ends the trial it ran: Optuna refuses its
    result (the trial is FAIL), and the run the trial wrote as it ended is closed FAILED with the reason."""
    study = optuna.create_study()

    class Tracker:
        def __init__(self) -> None:
            self.recorded: list[tuple[Any, str]] = []

        def lost(self, trials: list[Any]) -> None:
            self.recorded += [(trial, trial.user_attrs[LOST_ATTR]) for trial in trials]

    tracker = Tracker()

    def run(trial: optuna.Trial) -> float:
        if trial.number == 0:  # another worker took this one for dead meanwhile
            study._storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
        return 1.0

    def enough(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        study.stop()

    objective = scripted_runner(run, None)
    _optimize.optimize(study, objective, timeout=None, callback=enough, tracker=tracker)  # type: ignore[arg-type]
    assert [(trial.number, reason) for trial, reason in tracker.recorded] == [(0, _optimize.STALE)]
    assert [t.state.name for t in study.trials] == ["FAIL", "COMPLETE"]
