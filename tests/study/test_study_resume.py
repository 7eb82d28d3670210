"""Resume after a crash: `composer optimize` killed with SIGKILL mid-trial, then run again at once,
completes the study without losing or re-running a completed trial; the cut-off trial is failed at once
(its process is gone) and retried, and MLflow keeps one parent run and one run per trial. Trials answer
through a local LLM server that takes its time, so a trial is still running when the kill comes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import optuna
import pytest
from fake_llm_server import FakeLLMServer
from sample_study import write_experiment
from sqlalchemy.exc import OperationalError

from composer.record import TrialRecord
from composer.study.experiment import load_experiment

DIMS = {"retrieval.mode": {"choices": ["bm25"]}, "chunking.method": {"choices": ["paragraph", "sentence"]},
        "retrieval.k": {"type": "int", "low": 1, "high": 10}}
COMPOSER = str(Path(sys.executable).parent / "composer")


def snapshot(url: str) -> list[optuna.trial.FrozenTrial]:
    """The study's trials as another process sees them (the writer may hold the SQLite lock briefly)."""
    for _ in range(50):
        try:
            return optuna.load_study(study_name="resume", storage=url).trials
        except (KeyError, OperationalError):
            time.sleep(0.2)
    raise AssertionError("study storage not readable")


@pytest.fixture
def fake_llm_latency() -> float:
    """Slow replies: the study is still running when it is killed."""
    return 0.03


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_killed_study_resumes_without_losing_or_rerunning_trials(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    exp_file = write_experiment(tmp_path, dims=DIMS, n_questions=45, name="resume", n_trials=6, batch_size=15,
                                heartbeat_interval=600, mlflow={"traces": 1}, workdir=".composer",
                                llm={"model": "openai/slow", "api_base": fake_llm.url, "timeout": 10})
    exp = load_experiment(exp_file)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "150"}
    log = (tmp_path / "first.log").open("w")
    first = subprocess.Popen([COMPOSER, "optimize", str(exp_file)], cwd=tmp_path, stdout=log,
                             stderr=subprocess.STDOUT, env=env, start_new_session=True)

    # Kill while a trial runs, after two have completed. The trial must have run a moment: Optuna only
    # fails trials by heartbeat once their first heartbeat is written, just after they start.
    deadline = time.monotonic() + 240
    while True:
        assert first.poll() is None, (tmp_path / "first.log").read_text()
        assert time.monotonic() < deadline, "the study never reached its third trial"
        # Read only once the study exists: two processes creating the SQLite schema at once collide.
        if "trials finished" in (tmp_path / "first.log").read_text():
            trials = snapshot(exp.storage_url)
            done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
            running = [t for t in trials if t.state == optuna.trial.TrialState.RUNNING
                       and t.datetime_start is not None
                       and (datetime.now() - t.datetime_start).total_seconds() > 0.5]
            if len(done) >= 2 and running:
                break
        time.sleep(0.1)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    before = {t.number: t for t in snapshot(exp.storage_url) if t.state == optuna.trial.TrialState.COMPLETE}
    killed = [t for t in snapshot(exp.storage_url) if t.state == optuna.trial.TrialState.RUNNING]
    assert len(killed) == 1 and len(before) >= 2

    # Rerun at once: the heartbeat (600 s) cannot have failed the cut-off trial, its dead pid does.
    second = subprocess.run([COMPOSER, "optimize", str(exp_file)], cwd=tmp_path, capture_output=True,
                            text=True, env=env, timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"{len(before)} trials finished, {6 - len(before)} to run" in second.stderr

    trials = snapshot(exp.storage_url)
    states = {t.number: t.state for t in trials}
    finished = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    # No completed trial lost or re-run: same numbers, values and completion times as before the kill.
    for number, old in before.items():
        now = trials[number]
        assert now.state == optuna.trial.TrialState.COMPLETE
        assert (now.value, now.datetime_complete) == (old.value, old.datetime_complete)
    records = [r for t in finished if (r := TrialRecord.of(t)) is not None]
    ran = [r for r in records if r.duplicate_of is None]
    assert len(ran) == 6  # n_trials distinct configurations (a repeat is answered, not counted)
    assert len(records) == len(finished) and len({r.config_hash for r in ran}) == len(ran)
    # The cut-off trial failed (its process is gone) and was retried with the same parameters.
    lost = killed[0].number
    assert states[lost] == optuna.trial.TrialState.FAIL
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == lost]
    assert len(retries) == 1 and retries[0].params == killed[0].params
    assert retries[0].state == optuna.trial.TrialState.COMPLETE

    from mlflow import MlflowClient

    client = MlflowClient(exp.tracking_uri)
    experiment = client.get_experiment_by_name("resume")
    assert experiment is not None
    parents = client.search_runs([experiment.experiment_id], filter_string="tags.`composer.role` = 'study'")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.`composer.role` = 'trial'")
    numbers = sorted(int(r.data.tags["composer.trial"]) for r in runs)
    assert numbers == sorted(states)  # one run per trial, none twice
    by_number = {int(r.data.tags["composer.trial"]): r for r in runs}
    assert by_number[lost].info.status == "FAILED"
    assert by_number[lost].data.tags["composer.state"] == "FAIL"
    assert "process running this trial died" in by_number[lost].data.tags["composer.error"]
    for number in before:
        assert by_number[number].info.status == "FINISHED"
