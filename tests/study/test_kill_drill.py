"""The kill drill, short (benchmarks/bench_drill.py runs ten random kills of the demo study): a study
answering through a slow local LLM is killed with SIGKILL mid-trial, then study and MLflow writer
together mid-trial, then while starting, and rerun at once each time. At the end: n_trials finished, no
trial lost or finished twice, one MLflow run per Optuna trial with the trial's state, and the same
leaderboard as an uninterrupted run with the same seed."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import optuna
import pytest
from fake_llm_server import FakeLLMServer
from sample_study import write_experiment

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_drill import audit, experiment_copy, leaderboard_rows, optimize, writer_pids

DIMS = {"retrieval.mode": {"choices": ["bm25"]}, "chunking.method": {"choices": ["paragraph", "sentence"]},
        "retrieval.k": {"type": "int", "low": 1, "high": 10}}


@pytest.fixture
def fake_llm_latency() -> float:
    """Slow replies: the study is still running when it is killed."""
    return 0.03


def trials(storage: str) -> list[optuna.trial.FrozenTrial]:
    try:
        return optuna.load_study(study_name="drill", storage=storage).get_trials(deepcopy=False)
    except Exception:  # not created yet, or the schema being written
        return []


def mid_trial(storage: str) -> Callable[[], bool]:
    """True once a trial has been running for half a second (its first batch under way)."""

    def running() -> bool:
        now = datetime.now()
        return any(t.state.name == "RUNNING" and t.datetime_start is not None
                   and (now - t.datetime_start).total_seconds() > 0.5 for t in trials(storage))

    return running


def kill_when(experiment: Path, log: Path, ready: Callable[[], bool], *, writer_too: bool) -> None:
    process = optimize(experiment, log)
    deadline = time.monotonic() + 240
    while not ready():
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "the moment to kill never came"
        time.sleep(0.05)
    victims = writer_pids(process.pid) if writer_too else []
    os.kill(process.pid, signal.SIGKILL)
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    process.wait()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_study_killed_three_times_ends_as_if_never_killed(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    source = write_experiment(tmp_path, dims=DIMS, n_questions=45, name="drill", n_trials=5, batch_size=15,
                              sampler={"name": "tpe", "seed": 3, "n_startup_trials": 2},
                              heartbeat_interval=600, mlflow={"traces": 2},
                              llm={"model": "openai/slow", "api_base": fake_llm.url, "timeout": 10})
    reference = experiment_copy(source, tmp_path / "reference-work", tmp_path / "reference.yaml")
    reference_log = tmp_path / "reference.log"
    assert optimize(reference, reference_log).wait() == 0, reference_log.read_text()
    expected = leaderboard_rows(trials(f"sqlite:///{tmp_path / 'reference-work' / 'optuna.db'}"))
    assert len(expected) >= 5

    drilled = experiment_copy(source, tmp_path / "drill-work", tmp_path / "drill.yaml")
    storage = f"sqlite:///{tmp_path / 'drill-work' / 'optuna.db'}"
    log = tmp_path / "drill.log"
    kill_when(drilled, log, mid_trial(storage), writer_too=False)
    kill_when(drilled, log, lambda: len(trials(storage)) >= 3 and mid_trial(storage)(), writer_too=True)
    started = time.monotonic()
    kill_when(drilled, log, lambda: time.monotonic() - started > 1.0, writer_too=False)  # starting up
    assert optimize(drilled, log).wait(timeout=300) == 0, log.read_text()

    result = audit(drilled)
    assert result.finished == 5 and result.lost == [] and result.duplicated == []
    assert result.retried >= 2  # the two kills mid-trial each cut one off
    assert result.mlflow_parents == 1
    assert (result.mlflow_missing, result.mlflow_extra, result.mlflow_wrong_status) == ([], [], [])
    assert result.leaderboard == expected
