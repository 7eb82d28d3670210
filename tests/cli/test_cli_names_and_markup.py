"""The CLI's third round of faults: study names that are paths or markup, user text read as Rich markup,
`composer ui` on every interface, and two mislabelled outputs."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest
from ended_trials import ended_trial
from optuna.trial import FrozenTrial
from sample_study import SAMPLE, write_experiment
from typer.testing import CliRunner

from composer.cli.app import app
from composer.tracking.trial import TrialArtifacts

DIMS = {"retrieval.mode": {"choices": ["bm25"]}, "retrieval.k": {"type": "int", "low": 1, "high": 20}}


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


@pytest.mark.parametrize("command", ["optimize", "trials", "export", "report"])
def test_a_study_name_that_is_a_path_or_markup_is_refused_before_anything_is_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    root = tmp_path / "a" / "b" / "c"
    root.mkdir(parents=True)
    exp_file = write_experiment(root, dims=DIMS, n_questions=5, name="r3cli", n_trials=1, workdir="work",
                                objective={"k": 5, "metrics": {"recall": 1}})
    monkeypatch.chdir(root)
    before = _files(tmp_path)
    for name in (str(tmp_path / "abs" / "ABS"), "../../../ESCAPED", "x[/]y", "..", "a/b"):
        args = {
            "optimize": ["optimize", str(exp_file), "--study-name", name],
            "trials": ["trials", name, "-e", str(exp_file)],
            "export": ["export", name, "-e", str(exp_file), "--out", "best.yaml"],
            "report": ["report", name, "-e", str(exp_file)],
        }[command]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, (name, result.output)
        field = "--study-name" if command == "optimize" else "STUDY"
        assert result.output.strip() == f"error: field '{field}': not a study name: {name!r}; use letters, " \
            "digits, '_', '.' and '-' (not only dots), e.g. my-study.v2", result.output
        assert _files(tmp_path) == before, name  # no work dir, no Optuna study, no folder outside


def _corpus(root: Path) -> tuple[Path, Path]:
    corpus = root / "corpus.jsonl"
    corpus.write_text(
        '{"id": "root[/]0", "text": "what is here: [red]x[/red] and :x: too"}\n'
        '{"id": "b", "text": "another text about nothing"}\n', encoding="utf-8")
    config = root / "pipeline.yaml"
    config.write_text("retrieval: {mode: bm25, k: 2}\n", encoding="utf-8")
    return corpus, config


def test_search_prints_the_query_ids_and_texts_literally(tmp_path: Path) -> None:
    corpus, config = _corpus(tmp_path)
    args = ["search", "what is [/] here :x: [red]", "--corpus", str(corpus), "--config", str(config),
            "--workdir", str(tmp_path / "w"), "--width", "300"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "what is [/] here :x: [red]" in result.output
    assert "root[/]0#0" in result.output
    assert "[red]x[/red] and :x: too" in result.output
    assert "❌" not in result.output


def test_index_report_prints_file_names_literally(tmp_path: Path) -> None:
    _, config = _corpus(tmp_path)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.txt").write_text("some text to index", encoding="utf-8")
    (docs / ":x: [bold]empty.txt").write_text("", encoding="utf-8")
    result = CliRunner().invoke(app, ["index", str(docs), "--config", str(config), "--workdir",
                                      str(tmp_path / "w"), "--report"])
    assert result.exit_code == 0, result.output
    assert ":x: [bold]empty.txt: empty file" in result.output and "❌" not in result.output


def test_an_error_naming_a_path_with_brackets_prints_it_literally(tmp_path: Path) -> None:
    _, config = _corpus(tmp_path)
    missing = tmp_path / "c[/]x :x:.jsonl"
    result = CliRunner().invoke(app, ["search", "q", "--corpus", str(missing), "--config", str(config)])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {missing}: file not found"


def test_the_leaderboard_prints_sampled_values_literally() -> None:
    import pandas as pd

    from composer.study.leaderboard import render_leaderboard, report_console

    board = pd.DataFrame([{"trial": 0, "state": "COMPLETE", "composite": 0.5,
                           "config": "prompt=[red]x[/] :x:", "index_key": "k", "duplicate_of": None,
                           "seconds": 1.0}])
    console = report_console()
    with console.capture() as captured:
        console.print(render_leaderboard(board))
    assert "prompt=[red]x[/] :x:" in captured.get()


class _ServerThatExits:
    """Stands in for the MLflow server process: records how it was started, and has exited."""

    started: ClassVar[list[tuple[list[str], dict[str, str]]]] = []

    def __init__(self, command: list[str], env: dict[str, str], **_: object) -> None:
        self.started.append((command, env))
        self.pid = -1
        self.returncode = 3

    def poll(self) -> int:
        return self.returncode


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "myhost.example"])
def test_ui_beyond_this_machine_warns_that_the_runs_are_readable_and_passes_mlflows_host_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: str
) -> None:
    import subprocess

    monkeypatch.setattr(subprocess, "Popen", _ServerThatExits)
    _ServerThatExits.started.clear()
    result = CliRunner().invoke(app, ["ui", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--host",
                                      host, "--port", "5999", "--allowed-hosts", "mlflow.example:5999",
                                      "--cors-allowed-origins", "http://mlflow.example:5999"])
    assert result.exit_code == 2 and "the MLflow UI did not start (exit 3)" in result.output
    assert f"warning: --host {host}: the MLflow UI and its REST API have no login: anyone who can reach " \
           "port 5999 of this machine can read every run" in result.output
    assert "--allowed-hosts NAME:PORT" in result.output
    assert "at http://" in result.output.split("starting the MLflow UI for ")[1].splitlines()[0]  # at once
    command, env = _ServerThatExits.started[0]
    joined = " ".join(command)
    assert "--allowed-hosts mlflow.example:5999" in joined
    assert "--cors-allowed-origins http://mlflow.example:5999" in joined
    assert "--workers 1" in joined and env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1"])
def test_ui_on_loopback_does_not_warn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    import subprocess

    monkeypatch.setattr(subprocess, "Popen", _ServerThatExits)
    result = CliRunner().invoke(app, ["ui", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--host",
                                      host, "--port", "5999"])
    assert result.exit_code == 2 and "warning" not in result.output


def _mlflow_log(number: int, state: str, metrics: dict[str, float], questions: tuple[str, str] = ("a?", "b?"),
                answers: tuple[str, str] | None = None) -> tuple[FrozenTrial, TrialArtifacts]:
    import numpy as np
    from writer_logs import TABLE

    from composer.data.ranking import Ranking
    from composer.evaluation.report import EvaluationReport, SampleTable

    ranking = Ranking(("q1", "q2"), np.array([[0, 1], [2, -1]]), np.array([[0.9, 0.5], [0.7, 0.0]]), TABLE)
    table = SampleTable(("q1", "q2"), questions, metrics={"recall@1": np.array([1.0, 0.0])},
                        retrieved=ranking, **({"answers": answers} if answers is not None else {}))
    return ended_trial(number, {"retrieval": {"mode": "bm25", "k": 2}}, state, metrics=metrics,
                       report=EvaluationReport(table, (1,), "document"))


def test_the_composite_is_a_trials_first_metric_and_the_study_run_sorts_first_by_it(tmp_path: Path) -> None:
    """The compare page plots a run's first metric; runs lacking the metric sort last."""
    from mlflow import MlflowClient
    from writer_logs import writer_for

    writer = writer_for(tmp_path)
    for number, state, value in ((0, "COMPLETE", 0.7), (1, "COMPLETE", 0.9), (2, "PRUNED", 0.95),
                                 (3, "COMPLETE", 0.8), (4, "FAIL", 0.99)):
        metrics = {"hit_rate@1": 1.0, "recall@5": 0.5, "composite": value}
        writer.write_trial(*_mlflow_log(number, state, metrics))
    client = MlflowClient(writer.tracking_uri)
    run = client.get_run(writer.logged[0][0])
    assert next(iter(run.data.metrics)) == "composite"
    parent = client.get_run(writer.parent_run_id)
    assert parent.data.metrics["composite"] == 0.9  # its best complete trial's, not the pruned or failed
    ranked = client.search_runs([writer.experiment_id], order_by=["metrics.`composite` DESC"])
    order = [r.info.run_id for r in ranked]
    below = [writer.logged[n][0] for n in (0, 3)]  # complete trials below the best
    assert all(order.index(writer.parent_run_id) < order.index(run_id) for run_id in below)
    assert client.get_run(writer.logged[2][0]).info.status == "KILLED"


def test_a_trace_lists_its_arabic_question_and_answer_as_text(tmp_path: Path) -> None:
    import mlflow
    from mlflow import MlflowClient
    from writer_logs import writer_for

    writer = writer_for(tmp_path)
    question, answer = "ما هي عاصمة مصر؟", "القاهرة"
    writer.write_trial(*_mlflow_log(0, "COMPLETE", {"composite": 0.5}, questions=(question, "سؤال آخر؟"),
                                   answers=(answer, "")))
    mlflow.flush_trace_async_logging()
    traces = MlflowClient(writer.tracking_uri).search_traces(locations=[writer.experiment_id])
    previews = {(t.info.request_preview, t.info.response_preview) for t in traces}
    assert (question, answer) in previews


def test_eval_of_a_run_with_answers_says_they_came_from_the_run_file(tmp_path: Path) -> None:
    from fake_llm_server import FakeLLMServer
    from scripted_llm import ScriptedRAG
    from test_cli_new_user import _example_run

    questions, run, golds = _example_run(tmp_path, 2, answers=True)
    with FakeLLMServer(ScriptedRAG(golds)) as server:
        result = CliRunner().invoke(app, [
            "eval", str(questions), "--run", str(run), "--corpus", str(SAMPLE / "corpus.jsonl"),
            "--judge", "openai/fake", "--llm-base", server.url, "--metrics", "llm_judge_rating",
            "--workdir", str(tmp_path / "work")])
    assert result.exit_code == 0, result.output
    assert "LLM: answers from the run file, judge openai/fake" in result.output
    assert "extractive" not in result.output


def test_index_without_config_reports_the_folder_and_indexes_it_with_the_default_pipeline(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.txt").write_text("نص قصير عن القاهرة", encoding="utf-8")
    result = CliRunner().invoke(app, ["index", str(docs), "--workdir", str(tmp_path / "w"), "--report"])
    assert result.exit_code == 0, result.output
    assert "read 1 file(s)" in result.output and "repairs:" in result.output
    assert "built: 1 documents" in result.output
