"""``--ray local``: Ray started on this machine for the study, with the default SQLite storage and the
local MLflow store in the work dir (no server of any kind); Ray is shut down with the study."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sample_study import write_experiment

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_drill import audit

pytestmark = pytest.mark.slow  # starts Ray


def test_local_ray_works_with_the_default_sqlite_storage_and_mlflow_store(tmp_path: Path) -> None:
    exp = write_experiment(tmp_path, dims={"retrieval.mode": {"choices": ["bm25"]},
                                           "retrieval.k": {"choices": [3, 5, 10]}},
                           name="local", sampler={"name": "grid"}, n_trials=3, mlflow={"traces": 0})
    done = subprocess.run(
        [sys.executable, "-m", "composer", "optimize", str(exp), "--ray", "local", "--workers", "2"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Ray: 2 workers on local · dashboard http://" in done.stderr
    workdir = tmp_path / ".composer"
    assert (workdir / "optuna.db").is_file() and (workdir / "mlflow.db").is_file()
    found = audit(exp)
    assert found.finished == 3 and found.lost == [] and found.duplicated == []
    assert found.mlflow_parents == 1
    assert (found.mlflow_missing, found.mlflow_extra, found.mlflow_wrong_status) == ([], [], [])
