"""The MLflow writer process and its spool: logs written off the trials' path, nothing lost when the study
or the writer dies (the spool is written when the study resumes), one run per trial, Ctrl-C flushes."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ended_trials import ended_trial
from rich.console import Console
from writer_logs import runs_by_trial, settings, spool_trial, submit, trial_log, writer_for

from composer.data.ranking import ChunkTable
from composer.record import TrialRecord
from composer.study.live import StudyProgress
from composer.tracking.spool import RECORD, Orphans, Spool
from composer.tracking.trial_run import RunWriter
from composer.tracking.writer import TRACE_BACKLOG, StudyTracker, _write


def test_logs_are_written_by_the_writer_process_and_the_spool_emptied(tmp_path: Path) -> None:
    tracker = StudyTracker(settings(tmp_path, max_traces=1))
    assert tracker.ready()
    for number in range(3):
        submit(tracker, *trial_log(number))
    tracker.close()
    runs = runs_by_trial(tmp_path)
    assert sorted(runs) == [0, 1, 2] and all(r.info.status == "FINISHED" for r in runs.values())
    spool = tmp_path / "spool" / "s"
    assert not list(spool.glob(f"*{RECORD}"))
    # A trial written without its MLflow traces (the writer had others to write) keeps its record until
    # the study's end, which traces its leaders; here no study ends.
    untraced = {int(p.name[:6]) for p in spool.glob(f"untraced/*{RECORD}")}
    assert untraced == {n for n, run in runs.items() if "composer.traces" in run.data.tags}
    # The chunk table went to the spool once, by reference, not once per trial: as columns the writer maps.
    assert [p.name for p in (spool / "tables").iterdir()] == ["composer-test"]
    columns = sorted(p.name for p in (spool / "tables" / "composer-test").iterdir())
    assert columns == ["doc_ids", "ids", "texts"]


CHILD = textwrap.dedent("""
    import sys
    sys.path[:0] = sys.argv[2:]  # tests/, for its helpers
    from writer_logs import settings, spool_trial, trial_log
    from composer.tracking.spool import Spool
    from pathlib import Path
    import os
    spool = Spool(settings(Path(sys.argv[1])).spool)
    for number in range(2):
        spool_trial(spool, *trial_log(number))
    os._exit(0)  # dies with its logs spooled and no writer: what a SIGKILL leaves
""")


@pytest.mark.slow
def test_logs_a_dead_study_left_in_the_spool_are_written_when_it_resumes(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), *(str(p) for p in Path(__file__).resolve().parents[:2])],
        check=True, timeout=120,
    )
    spool = settings(tmp_path).spool
    adopted = Orphans(spool)
    assert len(adopted.files) == 2
    # Held until written: a second writer starting meanwhile finds nothing to adopt.
    assert Orphans(spool).files == []
    adopted.release()
    tracker = StudyTracker(settings(tmp_path))
    tracker.ready()
    submit(tracker, *trial_log(2))
    tracker.close()
    assert sorted(runs_by_trial(tmp_path)) == [0, 1, 2]
    assert Orphans(spool).files == []


@pytest.mark.slow
def test_a_writer_that_dies_leaves_the_logs_spooled_for_the_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("composer.tracking.writer.RESTARTS", 0)  # restarts: tracking/test_tracking_ui.py
    tracker = StudyTracker(settings(tmp_path))
    tracker.ready()
    submit(tracker, *trial_log(0))
    os.kill(tracker.process.pid, signal.SIGKILL)
    tracker.process.wait()
    for number in (1, 2):
        submit(tracker, *trial_log(number))  # never fails the trial: spooled for later
    tracker.close()
    assert tracker.failures and "writer stopped" in tracker.failures[0]
    written = set(runs_by_trial(tmp_path))
    again = StudyTracker(settings(tmp_path))
    again.ready()
    again.close()
    assert sorted(runs_by_trial(tmp_path)) == [0, 1, 2] and written <= {0, 1, 2}


def test_a_run_left_half_written_is_replaced_not_duplicated(tmp_path: Path) -> None:
    writer = writer_for(tmp_path)
    half = writer._trial_run(4, "RUNNING", {})  # a writer died before finishing it
    writer.write_trial(*trial_log(4))
    runs = runs_by_trial(tmp_path)
    assert runs[4].info.run_id != half and runs[4].info.status == "FINISHED"
    assert writer.write_trial(*trial_log(4)) == runs[4].info.run_id  # a finished run is kept as is


def test_a_repeat_points_at_the_run_of_the_trial_it_repeats(tmp_path: Path) -> None:
    writer = writer_for(tmp_path)
    original = writer.write_trial(*trial_log(0))
    config = {"retrieval": {"mode": "bm25", "k": 2}}
    writer.write_trial(*ended_trial(1, config, record=TrialRecord(config, "hash", duplicate_of=0)))
    assert runs_by_trial(tmp_path)[1].data.tags["composer.duplicate_of_run"] == original


@pytest.mark.slow
def test_a_writer_behind_the_trials_skips_mlflow_traces_and_keeps_traces_jsonl(tmp_path: Path) -> None:
    """MLflow traces are the slowest thing a trial logs: while more than TRACE_BACKLOG records wait, the
    writer leaves them out (saying so in a tag); every question stays in the run's traces.jsonl."""
    import mlflow
    from mlflow import MlflowClient

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    writer = RunWriter(f"sqlite:///{tmp_path / 'mlflow.db'}", "writer", "s", storage=storage, max_traces=2)
    spool = Spool(tmp_path / "spool")
    tables: dict[str, ChunkTable] = {}
    for number, backlog in ((0, 0), (1, TRACE_BACKLOG + 1)):
        path = spool_trial(spool, *trial_log(number))
        assert _write(writer, path, spool.tables, tables, backlog) is None
    mlflow.flush_trace_async_logging()  # in-process here; the writer process logs traces synchronously
    runs = runs_by_trial(tmp_path)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    for number, traced in ((0, 2), (1, 0)):
        run = runs[number]
        found = client.search_traces(locations=[run.info.experiment_id], run_id=run.info.run_id)
        assert len(found) == traced
        lines = Path(client.download_artifacts(run.info.run_id, "traces.jsonl", str(tmp_path / str(number))))
        assert len(lines.read_text(encoding="utf-8").splitlines()) == 2
    assert "composer.traces" not in runs[0].data.tags
    assert runs[1].data.tags["composer.traces"].startswith("skipped: the MLflow writer was behind")


@pytest.mark.slow
def test_a_trial_slower_than_a_traced_write_gets_its_traces_behind_a_few_others(tmp_path: Path) -> None:
    """Behind up to TRACE_BACKLOG others, a trial gets its MLflow traces only if it took at least as long
    as the writer took for its last traced run (tracing it then keeps pace); with none before it, always."""
    import mlflow
    from mlflow import MlflowClient

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    writer = RunWriter(f"sqlite:///{tmp_path / 'mlflow.db'}", "writer", "s", storage=storage, max_traces=2)
    spool = Spool(tmp_path / "spool")
    tables: dict[str, ChunkTable] = {}
    an_hour_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    cases = [  # number, backlog, started (None: just now), traces
        (0, 0, None, 2),
        (1, 1, None, 0),
        (2, TRACE_BACKLOG, an_hour_ago, 2),
        (3, TRACE_BACKLOG + 1, an_hour_ago, 0),
    ]
    for number, backlog, started, _ in cases:
        trial, report = trial_log(number)
        if started is not None:
            trial.datetime_start = started
        path = spool_trial(spool, trial, report)
        assert _write(writer, path, spool.tables, tables, backlog) is None
        if number == 0:
            assert writer.traced_seconds is not None and writer.traced_seconds > 0
    mlflow.flush_trace_async_logging()  # in-process here; the writer process logs traces synchronously
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = runs_by_trial(tmp_path)
    found = {n: len(client.search_traces(locations=[r.info.experiment_id], run_id=r.info.run_id))
             for n, r in runs.items()}
    assert found == {number: traced for number, _, _, traced in cases}
    assert runs[1].data.tags["composer.traces"].startswith("skipped: the MLflow writer was behind")


@pytest.mark.slow
def test_a_writer_that_keeps_up_writes_every_trials_mlflow_traces(tmp_path: Path) -> None:
    """Trials slower than the writer (each submitted once the one before is written) all get their MLflow
    traces: the backlog is what the writer has yet to write, not the answers the study has not read."""
    import mlflow
    from mlflow import MlflowClient

    tracker = StudyTracker(settings(tmp_path, max_traces=2))
    tracker.ready()
    for number in range(TRACE_BACKLOG + 7):
        submit(tracker, *trial_log(number))
        deadline = time.monotonic() + 60
        while list(tracker.spool.owner.glob(f"*{RECORD}")) and time.monotonic() < deadline:
            time.sleep(0.05)
    tracker.close()
    mlflow.flush_trace_async_logging()
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = runs_by_trial(tmp_path)
    assert sorted(runs) == list(range(TRACE_BACKLOG + 7))
    for run in runs.values():
        assert len(client.search_traces(locations=[run.info.experiment_id], run_id=run.info.run_id)) == 2
        assert "composer.traces" not in run.data.tags


def test_two_writers_adding_the_segment_tag_together_take_the_next_segment() -> None:
    """A tracking server on PostgreSQL refuses the second insert of a new tag (a duplicate key): the writer
    that lost reads the tag again and takes the segment after the other's, instead of failing the worker."""
    from mlflow.exceptions import MlflowException

    class Server:
        def __init__(self) -> None:
            self.tags: dict[str, str] = {}
            self.refused = 0

        def get_run(self, run_id: str) -> Any:
            return SimpleNamespace(data=SimpleNamespace(tags=dict(self.tags)))

        def set_tag(self, run_id: str, key: str, value: str) -> None:
            if not self.refused:  # the other worker's insert lands between this one's read and write
                self.refused += 1
                self.tags[key] = "1"
                raise MlflowException("duplicate key value violates unique constraint \"tag_pk\"")
            self.tags[key] = value

    server = Server()
    writer = SimpleNamespace(client=server, parent_run_id="parent")
    assert RunWriter._next_segment(writer) == 1  # type: ignore[arg-type]
    assert server.tags["composer.segments"] == "2" and server.refused == 1


def test_the_live_view_shows_a_running_trials_progress() -> None:
    progress = StudyProgress(Console(file=io.StringIO()), target=10, done=2)
    progress.stage("retrieved", 50, 50)
    progress.stage("answered", 12, 50)
    status = progress.__rich__()
    assert "trial 2/10" in status and "running: retrieved 50/50, answered 12/50" in status


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ctrl_c_stops_the_study_and_still_writes_what_ran(tmp_path: Path) -> None:
    """SIGINT to the study's process group (as a terminal's Ctrl-C): the study stops, its writer (in a
    session of its own) writes every finished trial, and the parent run ends KILLED."""
    from sample_study import write_experiment

    dims = {"retrieval.mode": {"choices": ["bm25"]}, "retrieval.k": {"type": "int", "low": 1, "high": 20}}
    exp_file = write_experiment(tmp_path, dims=dims, n_trials=500, workdir=str(tmp_path / "work"),
                                n_questions=40)
    composer = str(Path(sys.executable).with_name("composer"))
    log = (tmp_path / "log").open("w")
    proc = subprocess.Popen(
        [composer, "optimize", str(exp_file)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    while "#5 " not in (tmp_path / "log").read_text():
        assert proc.poll() is None, (tmp_path / "log").read_text()
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=120) != 0

    import optuna
    from mlflow import MlflowClient

    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'work' / 'optuna.db'}")
    finished = {t.number for t in study.trials if t.state.is_finished()}
    client = MlflowClient(f"sqlite:///{tmp_path / 'work' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("s")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.`composer.role` = 'trial'")
    assert finished <= {int(r.data.tags["composer.trial"]) for r in runs} and len(finished) >= 5
    [parent] = client.search_runs([experiment.experiment_id], filter_string="tags.`composer.role` = 'study'")
    assert parent.info.status == "KILLED"
