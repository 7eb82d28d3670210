"""A study's workers on a two-node Ray cluster (``composer optimize --ray ADDRESS --workers 2``) over
PostgreSQL and an MLflow server: the leaderboard of one process, trials run by both workers, one MLflow
parent run with one child run per trial; a worker killed mid-trial has its trial failed and retried,
nothing lost or duplicated. Needs PostgreSQL's server binaries (as tests/study/test_study_workers.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import optuna
import pytest
from fake_llm_server import FakeLLMServer
from postgres import Postgres
from sample_study import write_experiment

from composer.study._workers import WORKER_ATTR

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_drill import audit

pytestmark = pytest.mark.slow  # a Ray cluster, PostgreSQL and an MLflow server per module

DIMS = {"retrieval.mode": {"choices": ["bm25"]}, "retrieval.k": {"choices": [1, 3, 5, 10]},
        "retrieval.stem": {"choices": [True, False]}}
N_TRIALS = 8  # the grid


@pytest.fixture
def fake_llm_latency() -> float:
    """Trials long enough that both workers take some, and that one can be killed mid-trial."""
    return 0.15


def experiment(root: Path, name: str, llm: FakeLLMServer, **fields: Any) -> Path:
    root.mkdir(exist_ok=True)
    return write_experiment(root, dims=DIMS, n_questions=20, name=name, sampler={"name": "grid"},
                            n_trials=N_TRIALS, batch_size=10, file=f"{name}.yaml",
                            llm={"model": "openai/slow", "api_base": llm.url, "timeout": 10}, **fields)


def optimize(experiment: Path, *args: str, log: Path) -> subprocess.Popen[bytes]:
    """``composer optimize EXPERIMENT ARGS`` in the background, its output in ``log``."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "composer", "optimize", str(experiment), *args],
                                stdout=out, stderr=out, env=env, cwd=experiment.parent)


def board(storage: str, name: str) -> dict[tuple[tuple[str, Any], ...], float | None]:
    """Each finished configuration's objective value (repeats agree with their first trial)."""
    study = optuna.load_study(study_name=name, storage=storage)
    return {tuple(sorted(t.params.items())): t.value for t in study.get_trials(deepcopy=False)
            if t.state == optuna.trial.TrialState.COMPLETE}


def test_two_ray_workers_give_the_leaderboard_of_one_process(
    tmp_path: Path, postgres: Postgres, ray_cluster: str, mlflow_server: str, fake_llm: FakeLLMServer
) -> None:
    storage = postgres.database("same_board")
    on_ray = experiment(tmp_path, "onray", fake_llm, storage=storage, mlflow={"traces": 0, "tracking_uri":
                                                                             mlflow_server})
    log = tmp_path / "onray.log"
    started = time.monotonic()
    driver = optimize(on_ray, "--ray", ray_cluster, "--workers", "2", log=log)
    assert driver.wait(timeout=240) == 0, log.read_text()[-4000:]
    print(f"\n2 Ray workers: {N_TRIALS} trials in {time.monotonic() - started:.1f} s")
    assert "Ray: 2 workers on" in log.read_text()

    one = experiment(tmp_path / "one", "one", fake_llm, mlflow={"traces": 0})
    started = time.monotonic()
    assert optimize(one, log=tmp_path / "one.log").wait(timeout=240) == 0
    print(f"one process: {N_TRIALS} trials in {time.monotonic() - started:.1f} s")
    expected = board(f"sqlite:///{tmp_path / 'one' / '.composer' / 'optuna.db'}", "one")
    assert len(expected) == N_TRIALS
    assert board(storage, "onray") == expected

    trials = optuna.load_study(study_name="onray", storage=storage).get_trials(deepcopy=False)
    assert len({t.system_attrs[WORKER_ATTR] for t in trials}) == 2  # both workers ran trials
    found = audit(on_ray)
    assert found.finished == N_TRIALS and found.lost == [] and found.duplicated == []
    assert found.mlflow_parents == 1
    assert (found.mlflow_missing, found.mlflow_extra, found.mlflow_wrong_status) == ([], [], [])
    assert log.read_text().count("best: trial #") == 1  # the driver reported the study once


def running_worker(driver: subprocess.Popen[bytes], log: Path, url: str, name: str) -> int:
    """The pid of a worker whose trial has run for half a second (within 3 minutes). The study is read
    through one storage, opened once the driver has made the study (its "Ray:" line): a ``load_study`` by
    URL opens a pool of connections each time, and twenty polls a second exhausted the server's."""
    deadline = time.monotonic() + 180
    storage = None
    try:
        while True:
            assert driver.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, "no trial ran long enough"
            if storage is None and "Ray: " in log.read_text(errors="replace"):
                storage = optuna.storages.RDBStorage(url)
            if storage is not None:
                now = datetime.now()
                for t in optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False):
                    worker = t.system_attrs.get(WORKER_ATTR)
                    if (t.state.name == "RUNNING" and isinstance(worker, str) and t.datetime_start is not None
                            and (now - t.datetime_start).total_seconds() > 0.5):
                        return int(worker.rsplit(":", 2)[1])
            time.sleep(0.05)
    finally:
        if storage is not None:
            storage.engine.dispose()


def test_a_worker_killed_mid_trial_has_its_trial_failed_and_retried(
    tmp_path: Path, postgres: Postgres, ray_cluster: str, mlflow_server: str, fake_llm: FakeLLMServer
) -> None:
    storage = postgres.database("killed")
    exp = experiment(tmp_path, "killed", fake_llm, storage=storage,
                     mlflow={"traces": 0, "tracking_uri": mlflow_server})
    log = tmp_path / "killed.log"
    driver = optimize(exp, "--ray", ray_cluster, "--workers", "2", log=log)
    pid = running_worker(driver, log, storage, "killed")
    os.kill(pid, signal.SIGKILL)
    assert driver.wait(timeout=240) == 0, log.read_text()[-4000:]

    found = audit(exp)
    assert found.finished == N_TRIALS and found.lost == [] and found.duplicated == []
    assert found.retried >= 1  # the killed worker's trial, failed and run again
    assert found.mlflow_parents == 1
    assert (found.mlflow_missing, found.mlflow_extra, found.mlflow_wrong_status) == ([], [], [])


def test_ctrl_c_in_the_driver_ends_the_workers_within_seconds(
    tmp_path: Path, postgres: Postgres, ray_cluster: str, mlflow_server: str, fake_llm: FakeLLMServer
) -> None:
    storage = postgres.database("ctrl_c")
    exp = experiment(tmp_path, "ctrlc", fake_llm, storage=storage,
                     mlflow={"traces": 0, "tracking_uri": mlflow_server})
    log = tmp_path / "ctrlc.log"
    # A driver started in the background inherits SIGINT ignored: restore Python's handler, as a terminal has.
    driver = subprocess.Popen(
        [sys.executable, "-m", "composer", "optimize", str(exp), "--ray", ray_cluster, "--workers", "2"],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    pid = running_worker(driver, log, storage, "ctrlc")
    driver.send_signal(signal.SIGINT)
    started = time.monotonic()
    assert driver.wait(timeout=60) != 0
    assert time.monotonic() - started < 30, "the driver took too long to end"
    while os.path.exists(f"/proc/{pid}") and time.monotonic() - started < 30:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{pid}"), "a Ray worker outlived the Ctrl-C"
    trials = optuna.load_study(study_name="ctrlc", storage=storage).get_trials(deepcopy=False)
    assert not [t.number for t in trials if t.state.name == "RUNNING"], "a trial was left running"
    assert any(t.state.name == "FAIL" for t in trials)  # the cut-off trial, run again when resumed
