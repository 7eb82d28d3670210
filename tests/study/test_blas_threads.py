"""A study keeps numpy's OpenBLAS on one thread while it runs (its idle threads spun on the cores the
MLflow writer needs) and gives the caller's setting back; the writer process starts with one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_info
from writer_logs import settings

from composer.study.study import blas_on_one_thread
from composer.tracking.writer import StudyTracker


def _openblas_threads() -> list[int]:
    np.ones((2, 2)) @ np.ones((2, 2))  # numpy's BLAS loaded and used
    return [pool["num_threads"] for pool in threadpool_info() if pool["internal_api"] == "openblas"]


def test_openblas_runs_on_one_thread_inside_and_as_before_after() -> None:
    before = _openblas_threads()
    assert before, "numpy's OpenBLAS not found"
    with blas_on_one_thread():
        assert _openblas_threads() == [1] * len(before)
    assert _openblas_threads() == before


def test_the_writer_process_starts_with_one_openblas_thread(tmp_path: Path) -> None:
    tracker = StudyTracker(settings(tmp_path))
    try:
        tracker.ready()
        environ = Path(f"/proc/{tracker.process.pid}/environ").read_bytes().split(b"\0")
        assert b"OPENBLAS_NUM_THREADS=1" in environ
    finally:
        tracker.close()
