"""A tiny open-file limit (``ulimit -n 16``) ends `composer optimize` with one line saying what to raise,
exit 2, no traceback: not an ``OSError [Errno 24]`` deep in SQLAlchemy, alembic or subprocess."""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
from pathlib import Path

from sample_study import write_experiment

from composer.cli.app import user_error_message

DIMS = {"retrieval.mode": {"choices": ["bm25"]}, "retrieval.k": {"type": "int", "low": 1, "high": 5}}


def test_optimize_under_a_tiny_open_file_limit_says_so_in_one_line(tmp_path: Path) -> None:
    experiment = write_experiment(tmp_path, dims=DIMS, n_trials=3, n_questions=10)
    composer = str(Path(sys.executable).with_name("composer"))
    done = subprocess.run(
        [composer, "optimize", str(experiment)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200", "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (16, 16)),
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "error: too many open files (the open-file limit is 16; raise it with `ulimit -n 1024`)" in output
    assert "Traceback" not in output and "Errno 24" not in output, output


def test_an_open_file_limit_wrapped_by_a_library_is_still_named() -> None:
    """SQLAlchemy and alembic raise their own errors from (or while handling) the OSError."""
    wrapped = RuntimeError("alembic: could not load the migration scripts")
    wrapped.__context__ = OSError(errno.EMFILE, "Too many open files")
    message = user_error_message(wrapped)
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    shown = "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
    assert message == f"too many open files (the open-file limit is {shown}; raise it with `ulimit -n 1024`)"
    assert user_error_message(RuntimeError("a bug")) is None
