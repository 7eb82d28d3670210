"""A study whose trials fail on a judge that never replies JSON, as a weak local model does: the failed
trial keeps the questions it answered, its answers, the judge's errors and its traces, in MLflow and in
the work dir; ``composer trials`` says why each trial failed; the report says what happened."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest
from fake_llm_server import ChatRequest, FakeLLMServer, Reply
from sample_study import SAMPLE, write_experiment
from scripted_llm import ScriptedRAG, golds_of, kind_of
from typer.testing import CliRunner

from composer.cli.app import app
from composer.study.experiment import ExperimentConfig, load_experiment

KEY_ENV = "COMPOSER_EVIDENCE_TEST_KEY"
N_QUESTIONS = 6
BATCH = 3


@dataclass
class Failed:
    exp_file: Path
    exp: ExperimentConfig
    study: optuna.Study
    output: str


@pytest.fixture(scope="module")
def failed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Failed]:
    """Three trials (three questions a batch, 25% may fail) judged by a model that replies no JSON."""
    root = tmp_path_factory.mktemp("evidence")
    golds = golds_of(SAMPLE / "questions.jsonl")
    scripted = ScriptedRAG(golds)

    def no_json(req: ChatRequest) -> Reply | str:
        if kind_of(req) in ("statements", "faithfulness"):
            return "The answer is supported by the context, I think."
        return scripted(req)

    os.environ[KEY_ENV] = "sk-evidence"
    with FakeLLMServer(no_json) as server:
        llm = {"model": "openai/fake", "api_base": server.url, "api_key_env": KEY_ENV, "timeout": 5.0,
               "max_retries": 0}
        exp_file = write_experiment(
            root, dims={"retrieval.k": {"choices": [3, 5, 10]}}, defaults={"retrieval": {"mode": "bm25"}},
            n_questions=N_QUESTIONS, name="evidence", sampler={"name": "grid", "seed": None}, n_trials=3,
            batch_size=BATCH, mlflow={"traces": 10}, llm=llm,
            objective={"k": 5, "metrics": {"recall": 1, "faithfulness": 1}},
            judge={"metrics": ["faithfulness"], "fallback": False, "max_failure_share": 0.25,
                   "embedding": None})
        result = CliRunner().invoke(app, ["optimize", str(exp_file)])
    del os.environ[KEY_ENV]
    exp = load_experiment(exp_file)
    study = optuna.load_study(study_name="evidence", storage=exp.storage_url)
    yield Failed(exp_file, exp, study, result.output)


def test_a_failed_trial_keeps_its_samples_and_traces_in_mlflow_and_the_work_dir(failed: Failed) -> None:
    from mlflow import MlflowClient

    assert [t.state.name for t in failed.study.trials] == ["FAIL"] * 3, failed.output
    client = MlflowClient(failed.exp.tracking_uri)
    experiment = client.get_experiment_by_name(failed.exp.mlflow_experiment)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], "tags.`composer.trial` = '0'")
    run = runs[0]
    run_id = run.info.run_id
    assert run.info.status == "FAILED"
    names = {a.path for a in client.list_artifacts(run_id)}
    assert {"config.yaml", "samples.csv", "traces.jsonl", "error_rates.json", "questions.json"} <= names
    # The first batch went over the budget: its three questions, their answers and the judge's errors.
    folder = Path(run.info.artifact_uri.removeprefix("file://"))
    assert folder.is_relative_to(failed.exp.work_dir)  # the work dir's own copy
    lines = [json.loads(line) for line in (folder / "traces.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(lines) == BATCH
    assert all(line["answer"] for line in lines)
    errors = [line["error"] for line in lines if line.get("error")]
    assert len(errors) >= 2 and all("no JSON in reply" in e["message"] for e in errors)
    rates = json.loads((folder / "error_rates.json").read_text(encoding="utf-8"))
    assert rates["reason"].startswith("FailureBudgetExceeded: ")
    assert rates["failed"]["count"] == len(errors)
    traces = client.search_traces(locations=[run.info.experiment_id], run_id=run_id)
    assert len(traces) == BATCH


def test_composer_trials_says_why_each_trial_failed(failed: Failed) -> None:
    result = CliRunner().invoke(app, ["trials", "evidence", "-e", str(failed.exp_file)],
                                env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "reason" in result.output
    assert len(re.findall(r"FailureBudgetExceeded: [23] of 6 samples failed", result.output)) == 3
    csv = CliRunner().invoke(app, ["trials", "evidence", "-e", str(failed.exp_file), "--csv"])
    assert csv.output.splitlines()[0].endswith(",reason")


def test_the_report_of_an_all_failed_study_says_what_happened(failed: Failed) -> None:
    out = failed.exp_file.parent / "report.html"
    result = CliRunner().invoke(app, ["report", "evidence", "-e", str(failed.exp_file), "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text(encoding="utf-8")
    head = page[page.find("<p>"):page.find("</p>")]
    assert "all 3 trials failed; no trial completed, so there is no winner" in page
    assert re.search(r"The commonest failure \([123] of 3\): FailureBudgetExceeded: [23] of 6 samples failed",
                     head), head
    assert "finished trials" not in page and "has no <code>split:</code>" not in page
    assert "No held-out re-score: no trial completed, so there is no winner to re-score." in page
