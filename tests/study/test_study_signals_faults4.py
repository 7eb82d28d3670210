"""SIGTERM and SIGHUP (``kill``, ``timeout``, a scheduler, a closed terminal) stop a study as Ctrl-C does:
its MLflow parent run ends KILLED instead of staying RUNNING forever."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sample_study import write_experiment

from composer.study.study import stop_on_signals

DIMS = {"retrieval.mode": {"choices": ["bm25"]}, "retrieval.k": {"type": "int", "low": 1, "high": 60}}


def test_sigterm_ends_the_studys_parent_run_killed(tmp_path: Path) -> None:
    experiment = write_experiment(tmp_path, dims=DIMS, n_trials=500, n_questions=10)
    env = {**os.environ, "COLUMNS": "200", "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    log = tmp_path / "study.log"
    with log.open("wb") as out:
        process = subprocess.Popen([str(Path(sys.executable).with_name("composer")), "optimize",
                                    str(experiment)], stdout=out, stderr=subprocess.STDOUT, env=env,
                                   cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while "#2 " not in log.read_text(errors="replace"):  # a few trials in: the parent run is RUNNING
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    output = log.read_text(errors="replace")
    assert code != 0 and "Traceback" not in output, output

    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / '.composer' / 'mlflow.db'}")
    experiment_found = client.get_experiment_by_name("s")
    assert experiment_found is not None
    [parent] = client.search_runs([experiment_found.experiment_id], "tags.`composer.role` = 'study'")
    assert parent.info.status == "KILLED", output


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_is_a_ctrl_c_to_the_study_and_its_handler_goes_after(sig: signal.Signals) -> None:
    assert signal.getsignal(sig) == signal.SIG_DFL
    with pytest.raises(KeyboardInterrupt), stop_on_signals():
        os.kill(os.getpid(), sig)
        time.sleep(5)  # the handler raises as soon as the signal lands
    assert signal.getsignal(sig) == signal.SIG_DFL


def test_a_host_applications_own_handler_is_left_alone() -> None:
    seen: list[int] = []
    previous = signal.signal(signal.SIGHUP, lambda signum, frame: seen.append(signum))
    try:
        with stop_on_signals():
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.1)
        assert seen == [signal.SIGHUP]
    finally:
        signal.signal(signal.SIGHUP, previous)
