"""Ctrl-C ends a study within seconds wherever it lands: no thread left beating a trial keeps the process
alive at exit (Optuna's heartbeat thread is not a daemon, and a KeyboardInterrupt between its start and
its ``with`` body used to leave it running forever), and the MLflow writer ends with the study."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from ended_trials import scripted_runner
from sample_study import write_experiment

from composer.study import _optimize
from composer.study._storage import make_storage

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_drill import writer_pids

DIMS = {"retrieval.mode": {"choices": ["bm25"]}, "retrieval.k": {"type": "int", "low": 1, "high": 60}}
RUNS = 6
EXIT_S = 20.0
"""Seconds a study and its MLflow writer may take to end after Ctrl-C: the writer first writes the
trials that finished (a few dozen records at most), on a machine whose cores are busy."""


def _stop_leaked(threads: list[threading.Thread]) -> None:
    """Let a test that failed end: set the stop event a leaked heartbeat thread waits on."""
    for thread in threads:
        for arg in getattr(thread, "_args", ()):
            if isinstance(arg, threading.Event):
                arg.set()


@pytest.fixture
def ctrl_c_after_heartbeat_starts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[threading.Thread]]:
    """KeyboardInterrupt raised in the main thread the moment a trial's heartbeat thread has started,
    before the trial's objective runs: where a Ctrl-C lands once in a while. Yields the threads started."""
    started: list[threading.Thread] = []
    start = threading.Thread.start

    def start_then_ctrl_c(self: threading.Thread) -> None:
        start(self)
        if "heartbeat" in self.name.lower() and threading.current_thread() is threading.main_thread():
            started.append(self)
            raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", start_then_ctrl_c)
    yield started
    monkeypatch.undo()
    _stop_leaked(started)


def test_ctrl_c_between_the_heartbeat_start_and_the_trial_leaves_no_thread_beating(
    tmp_path: Path, ctrl_c_after_heartbeat_starts: list[threading.Thread]
) -> None:
    storage = make_storage(f"sqlite:///{tmp_path / 'optuna.db'}", heartbeat_interval=1)
    study = optuna.create_study(storage=storage, study_name="s")
    ran: list[int] = []
    objective = scripted_runner(lambda trial: ran.append(trial.number) or 1.0, None)

    with pytest.raises(KeyboardInterrupt):
        _optimize.optimize(study, objective, timeout=None, callback=lambda study, trial: None)

    assert not ran and ctrl_c_after_heartbeat_starts, "the Ctrl-C landed before the trial ran"
    for thread in ctrl_c_after_heartbeat_starts:
        thread.join(timeout=5)
    beating = [t.name for t in ctrl_c_after_heartbeat_starts if t.is_alive()]
    assert not beating, f"still beating after Ctrl-C: {beating}"
    assert all(t.daemon for t in ctrl_c_after_heartbeat_starts), "a heartbeat thread would hold up the exit"


def _gone(pid: int) -> bool:
    """The process exited (a zombie not yet reaped counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "\nState:\tZ" in status


@pytest.fixture
def busy_cpu() -> Iterator[None]:
    """A process burning a core meanwhile: the moments Ctrl-C lands on spread out, as on a loaded machine."""
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield
    burner.kill()
    burner.wait()


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_ctrl_c_at_random_moments_ends_the_study_and_its_writer_within_seconds(
    tmp_path: Path, busy_cpu: None
) -> None:
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) while the study starts, in its
    trials, or as it ends: each time the study and its writer are gone within ``EXIT_S`` seconds."""
    experiment = write_experiment(tmp_path, dims=DIMS, n_trials=15, heartbeat_interval=1)
    composer = str(Path(sys.executable).with_name("composer"))
    env = {**os.environ, "COLUMNS": "200", "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "PYTHONFAULTHANDLER": "1"}
    rng = random.Random(os.environ.get("COMPOSER_TEST_SEED", time.time_ns()))
    for run in range(RUNS):
        log = tmp_path / f"run{run}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [composer, "optimize", str(experiment), "--study-name", f"s{run}"],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env, cwd=tmp_path,
            )
        # Started, a trial (its line shown), a moment after the first trial (a later one, or the end).
        after, delay = [
            (None, rng.uniform(0.05, 4)),
            (f"#{rng.randrange(8)} ", rng.uniform(0, 0.1)),
            ("#0 ", rng.uniform(0.5, 5)),
        ][run % 3]
        writers = _wait(process, log, after, delay)
        moment = f"run {run}: Ctrl-C {delay:.2f} s after {after or 'its start'} ({log.read_text()[-200:]!r})"
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
        sent = time.monotonic()
        try:
            process.wait(timeout=EXIT_S)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGABRT)  # its threads' stacks to the log (PYTHONFAULTHANDLER)
            time.sleep(1)
            os.killpg(process.pid, signal.SIGKILL)
            pytest.fail(f"{moment}: still running {EXIT_S:.0f} s after Ctrl-C\n{log.read_text()[-6000:]}")
        while not all(_gone(pid) for pid in writers) and time.monotonic() - sent < EXIT_S:
            time.sleep(0.05)
        left = [pid for pid in writers if not _gone(pid)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert not left, f"{moment}: its MLflow writer still runs {EXIT_S:.0f} s after Ctrl-C"


def _wait(process: subprocess.Popen[bytes], log: Path, shown: str | None, delay: float) -> set[int]:
    """Wait until ``log`` shows ``shown`` (if given), then ``delay`` seconds; the study's MLflow writers
    seen meanwhile (the study may have ended: a writer reaped by then is gone)."""
    writers: set[int] = set()
    while shown is not None and shown not in log.read_text(errors="replace"):
        assert process.poll() is None, f"ended before showing {shown!r}:\n{log.read_text()}"
        writers.update(writer_pids(process.pid))
        time.sleep(0.01)
    deadline = time.monotonic() + delay
    while time.monotonic() < deadline and process.poll() is None:
        writers.update(writer_pids(process.pid))
        time.sleep(0.01)
    return writers | set(writer_pids(process.pid))
