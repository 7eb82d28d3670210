"""Worker resources a local Ray cannot supply: one line and exit 2 within seconds, not a driver that
waits forever for a node to place the workers on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sample_study import write_experiment

pytestmark = pytest.mark.slow  # starts Ray


def test_a_gpu_per_worker_on_a_machine_without_one_is_one_line(tmp_path: Path) -> None:
    gpu_each = {"address": "local", "resources": {"CPU": 1, "GPU": 1}}
    exp = write_experiment(tmp_path, executor={"ray": gpu_each})
    done = subprocess.run(  # a driver waiting to place its workers would run past the timeout
        [sys.executable, "-m", "composer", "optimize", str(exp)], cwd=tmp_path, capture_output=True,
        text=True, timeout=150,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
             "CUDA_VISIBLE_DEVICES": ""},  # no GPU for Ray to find, whatever the machine has
    )
    assert done.returncode == 2, done.stderr[-4000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "executor.ray.resources" in errors[0] and "GPU" in errors[0], done.stderr
    assert "Traceback" not in done.stderr
