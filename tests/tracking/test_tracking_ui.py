"""What a study shows in MLflow (issue 18.2, 18.3): traces with per-question assessments, the leaders' traces
always written, a per-question table, pruned trials KILLED, the winner marked, the parent's summary kept
per segment, PNG charts; the writer restarted when it dies (19); `composer ui` and `composer report`."""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from test_spool_records import study_summary
from writer_logs import runs_by_trial, settings, spool_trial, submit, trial_log, writer_for

from composer.data.ranking import ChunkTable
from composer.evaluation.artifacts import QUESTION_TABLE
from composer.summary import StudyLog
from composer.tracking.read import BEST_TAG, STATE_TAG, read_question_table
from composer.tracking.spool import RECORD, UNTRACED, Spool
from composer.tracking.trial_run import RunWriter
from composer.tracking.writer import TRACE_BACKLOG, StudyTracker, _write

GOLD = {
    "q1": {"expected_ids": ["a"], "expected_response": "alpha"},
    "q2": {"expected_ids": ["c"], "expected_response": None},
}


def client_for(tmp_path: Path) -> Any:
    from mlflow import MlflowClient

    return MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")


def gold_writer(tmp_path: Path, **options: Any) -> RunWriter:
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    return RunWriter(
        f"sqlite:///{tmp_path / 'mlflow.db'}", "writer", "s", storage=storage, expectations=GOLD, **options
    )


def traces_of(tmp_path: Path, run: Any) -> list[Any]:
    import mlflow

    mlflow.flush_trace_async_logging()
    client = client_for(tmp_path)
    return list(client.search_traces(locations=[run.info.experiment_id], run_id=run.info.run_id))


def board(*rows: tuple[int, str, float | None]) -> pd.DataFrame:
    return pd.DataFrame([{"trial": n, "state": s, "composite": c} for n, s, c in rows])


def test_each_trace_carries_its_metrics_as_feedback_and_its_gold_as_expectations(tmp_path: Path) -> None:
    writer = gold_writer(tmp_path)
    writer.write_trial(*trial_log(0))
    traces = traces_of(tmp_path, runs_by_trial(tmp_path)[0])
    assert len(traces) == 2
    by_question = {t.info.tags["composer.question_id"]: t for t in traces}
    first = {a.name: a for a in by_question["q1"].info.assessments}
    assert first["recall_at_1"].feedback.value == 1.0
    assert first["expected_ids"].expectation.value == ["a"]
    assert first["expected_response"].expectation.value == "alpha"
    second = {a.name: a for a in by_question["q2"].info.assessments}
    assert second["recall_at_1"].feedback.value == 0.0 and "expected_response" not in second


def test_every_trial_has_a_question_table_worst_first(tmp_path: Path) -> None:
    writer = gold_writer(tmp_path)
    writer.write_trial(*trial_log(0))
    run = runs_by_trial(tmp_path)[0]
    assert json.loads(run.data.tags["mlflow.loggedArtifacts"]) == [{"path": QUESTION_TABLE, "type": "table"}]
    table = read_question_table(client_for(tmp_path), run.info.run_id)
    assert list(table["question_id"]) == ["q2", "q1"]  # recall 0 first
    row = table.iloc[0]
    assert list(row["expected_ids"]) == ["c"] and list(row["retrieved_ids"]) == ["c#0"]
    assert row["recall@1"] == 0.0 and row["question"] == "second?"


def test_a_pruned_trial_is_killed_and_tagged_pruned_not_finished_like_a_complete_one(tmp_path: Path) -> None:
    """Issue 26: a pruned trial showed the same green "Finished" as a complete one (it was FINISHED)."""
    writer_for(tmp_path).write_trial(*trial_log(3, "PRUNED"))
    run = runs_by_trial(tmp_path)[3]
    assert run.info.status == "KILLED" and run.data.tags[STATE_TAG] == "PRUNED"


def test_the_experiment_opens_on_runs_and_says_how_a_study_is_laid_out(tmp_path: Path) -> None:
    writer = writer_for(tmp_path)
    tags = client_for(tmp_path).get_experiment(writer.experiment_id).tags
    assert tags["mlflow.experimentKind"] == "custom_model_development"
    assert "composer.best" in tags["mlflow.note.content"]


def test_the_winner_is_tagged_and_named_and_a_rerun_keeps_each_segments_summary(tmp_path: Path) -> None:
    writer = writer_for(tmp_path)
    for number in (0, 1):
        writer.write_trial(*trial_log(number))
    writer.write_study(study_summary(0, seconds=139.0), board((0, "COMPLETE", 0.6)), {"history": b"png"})
    writer.close()
    import optuna

    study = optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    study.optimize(lambda t: 0.0, n_trials=1)  # the study has trials: it resumes
    again = writer_for(tmp_path)  # its second segment
    again.write_study(study_summary(1, seconds=13.5), board((1, "COMPLETE", 0.7)), {})
    again.close()
    runs = runs_by_trial(tmp_path)
    assert runs[1].info.run_name == "★ best #1" and runs[1].data.tags[BEST_TAG] == "true"
    assert runs[0].info.run_name == "trial-000" and BEST_TAG not in runs[0].data.tags
    client = client_for(tmp_path)
    history = client.get_metric_history(writer.parent_run_id, "seconds")
    assert sorted((m.step, m.value) for m in history) == [(0, 139.0), (1, 13.5)]
    assert [a.path for a in client.list_artifacts(writer.parent_run_id, "plots")] == ["plots/history.png"]
    parent = client.get_run(writer.parent_run_id)
    assert "best trial #1" in parent.data.tags["mlflow.note.content"]


def test_the_winner_and_runner_up_get_their_traces_after_the_study(tmp_path: Path) -> None:
    """Trials written while the writer was behind go without traces; at the study's end the two leading
    ones get theirs, the other untraced records are dropped."""
    writer = gold_writer(tmp_path)
    spool = Spool(tmp_path / "spool")
    tables: dict[str, ChunkTable] = {}
    for number in (0, 1, 2):
        path = spool_trial(spool, *trial_log(number))
        assert _write(writer, path, spool.tables, tables, TRACE_BACKLOG + 1) is None
    runs = runs_by_trial(tmp_path)
    assert all(traces_of(tmp_path, runs[n]) == [] for n in (0, 1, 2))
    path = spool_trial(spool, *trial_log(3))  # another worker's, finished after this one's leaderboard
    assert _write(writer, path, spool.tables, tables, TRACE_BACKLOG + 1) is None
    leaderboard = board((2, "COMPLETE", 0.9), (0, "COMPLETE", 0.8), (1, "COMPLETE", 0.1))
    path = spool.put("study", StudyLog(study_summary(2), leaderboard, {}))
    assert _write(writer, path, spool.tables, tables, 0) is None
    runs = runs_by_trial(tmp_path)
    assert [len(traces_of(tmp_path, runs[n])) for n in (0, 1, 2)] == [2, 0, 2]
    assert runs[2].data.tags["composer.traces"] == "written after the study: winner"
    assert runs[0].data.tags["composer.traces"] == "written after the study: runner-up"
    assert runs[2].info.status == "FINISHED"
    assert [p.name for p in (tmp_path / "spool" / UNTRACED).iterdir()] == [f"000003-trial{RECORD}"]


def test_a_store_error_a_retry_got_past_is_reported_not_only_in_writer_log(tmp_path: Path) -> None:
    class Locked:
        max_traces = None
        calls = 0

        def write_trial(self, trial: Any, report: Any, traces: bool) -> None:
            self.calls += 1
            if self.calls == 1:
                raise RuntimeError("(sqlite3.OperationalError) database is locked")

    spool = Spool(tmp_path / "spool")
    notes: list[str] = []
    path = spool_trial(spool, *trial_log(0))
    assert _write(Locked(), path, spool.tables, {}, 0, notes) is None
    assert notes == ["RuntimeError: (sqlite3.OperationalError) database is locked"]


@pytest.mark.slow
def test_a_killed_writer_is_restarted_and_writes_every_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tracker = StudyTracker(settings(tmp_path))
    tracker.ready()
    submit(tracker, *trial_log(0))
    os.kill(tracker.process.pid, signal.SIGKILL)
    tracker.process.wait()
    for number in range(1, 8):
        submit(tracker, *trial_log(number))
    with caplog.at_level(logging.WARNING, logger="composer"):
        tracker.close()
    assert sorted(runs_by_trial(tmp_path)) == list(range(8))
    assert tracker.restarts == 1 and "restarting it" in caplog.text
    assert "could not be written" not in caplog.text


@pytest.mark.slow
def test_a_writer_that_keeps_dying_counts_every_record_it_left(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("composer.tracking.writer.RESTARTS", 0)
    tracker = StudyTracker(settings(tmp_path))
    tracker.ready()
    os.kill(tracker.process.pid, signal.SIGKILL)
    tracker.process.wait()
    for number in range(7):
        submit(tracker, *trial_log(number))
    with caplog.at_level(logging.WARNING, logger="composer"):
        tracker.close()
    assert "7 records could not be written" in caplog.text


@pytest.mark.slow
def test_a_second_ctrl_c_while_flushing_leaves_the_writer_to_finish_without_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    tracker = StudyTracker(settings(tmp_path))
    tracker.ready()
    submit(tracker, *trial_log(0))

    def interrupted(status: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(tracker, "_drain", interrupted)
    previous = signal.getsignal(signal.SIGINT)
    try:
        with caplog.at_level(logging.WARNING, logger="composer"):
            tracker.close("KILLED")  # no KeyboardInterrupt out of it
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # exit handlers run uninterrupted
    finally:
        signal.signal(signal.SIGINT, previous)
    assert "finishes in the background" in caplog.text
    tracker.process.kill()
    tracker.process.wait()


def test_the_study_charts_are_png(tmp_path: Path) -> None:
    import optuna

    from composer.study.plots import plots

    study = optuna.create_study(direction="maximize")
    study.optimize(lambda t: t.suggest_float("x", 0, 1) + 0.1 * t.suggest_int("k", 1, 5), n_trials=8)

    class Exp:
        multi_objective = False

    charts = plots(study, Exp())  # type: ignore[arg-type]
    assert set(charts) == {"optimization_history", "param_importances"}
    assert all(png.startswith(b"\x89PNG") for png in charts.values())



def small_study(tmp_path: Path) -> Path:
    from sample_study import write_experiment

    dims = {"retrieval.mode": {"choices": ["bm25"]}, "retrieval.k": {"type": "int", "low": 1, "high": 20}}
    return write_experiment(tmp_path, dims=dims, n_trials=4, mlflow={"traces": 2},
                            workdir=str(tmp_path / "work"), n_questions=12)


@pytest.mark.slow
def test_report_writes_one_self_contained_page(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from composer.cli.app import app

    exp_file = small_study(tmp_path)
    runner = CliRunner()
    assert runner.invoke(app, ["optimize", str(exp_file)]).exit_code == 0
    out = tmp_path / "page.html"
    result = runner.invoke(app, ["report", "-e", str(exp_file), "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text(encoding="utf-8")
    assert "<h2>Leaderboard</h2>" in page and page.count("data:image/png;base64,") == 1  # the history
    assert "<p>Not drawn: 4 complete trials of distinct configurations, fewer than the 5" in page
    assert "<script" not in page and 'src="http' not in page  # nothing fetched (MLflow runs are only linked)
    worst = page.split("worst questions</h2>")[1]
    assert "<table" in worst and "expected_ids" in worst and "No per-question table" not in worst
    assert [p.name for p in tmp_path.glob("page.html*")] == ["page.html"]  # written atomically
    missing = runner.invoke(app, ["report", "s"])
    assert missing.exit_code == 2 and "give --experiment" in missing.output


@pytest.mark.slow
def test_ui_prints_the_runs_url_once_the_server_answers_and_stops_it_with_its_workers(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    from composer.cli.ui import runs_url

    assert runs_url("http://h:1", "3") == (
        "http://h:1/#/experiments/3/runs?orderByKey=metrics.%60composite%60&orderByAsc=false"
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    composer = str(Path(sys.executable).with_name("composer"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = subprocess.Popen(
        [composer, "ui", "--tracking-uri", uri, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith(f"MLflow UI: http://127.0.0.1:{port}/"), line
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10).close()  # it answers
        server_pids = [int(p) for p in subprocess.run(
            ["pgrep", "-f", "--", f"--port {port}"], capture_output=True, text=True
        ).stdout.split() if int(p) != proc.pid]
        assert server_pids
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in server_pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(p) for p in server_pids)  # the server and its workers are gone
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ")[-1][0] != "Z"
