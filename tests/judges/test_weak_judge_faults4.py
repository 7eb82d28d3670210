"""A study on a weak local model (the scripted server cutting off the judge's JSON on about 60% of its
requests): with ``fallback: true`` the rescued samples are scored, counted apart as ``judge_fallback``
(leaderboard, error_rates.json, HTML report) and the trials complete; without, the trial fails and says
the judge failed. Every token the server read is in Composer's totals, and a dollar budget stops on the
tokens of failed requests alone."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import json
import re
from pathlib import Path
from typing import Any

import optuna
import pytest
from fake_llm_server import ChatRequest, FakeLLMServer, Reply, server_error
from sample_study import SAMPLE, write_experiment
from scripted_llm import ScriptedRAG, WeakJudge, kind_of, tokenizer
from typer.testing import CliRunner

from composer.cli.app import app
from composer.cli.report import render_report
from composer.data import load_questions
from composer.llm.preflight import PING
from composer.record import TrialRecord
from composer.study.experiment import ExperimentConfig, load_experiment
from composer.study.fate import fate_of

MODEL = "openai/fake"
N_QUESTIONS = 8
DIMS = {"retrieval.k": {"choices": [3, 5]}}
DEFAULTS = {"retrieval": {"mode": "bm25"}, "generation": {"template": "grounded"}}
OBJECTIVE = {"k": 3, "metrics": {"recall": 1, "faithfulness": 1}}


def golds() -> dict[str, str]:
    return {q.question: q.gold_answers[0] for q in load_questions(SAMPLE / "questions.jsonl")}


def run(root: Path, server: FakeLLMServer, name: str, *, fallback: bool = True, share: float = 0.1,
        stop: dict[str, Any] | None = None) -> tuple[ExperimentConfig, optuna.Study, str]:
    llm = {"model": MODEL, "api_base": server.url, "timeout": 5.0, "max_retries": 1, "backoff_base": 0.01,
           "backoff_max": 0.02, "price": {"input": 1.0, "output": 2.0}}
    exp_file = write_experiment(
        root, dims=DIMS, defaults=DEFAULTS, n_questions=N_QUESTIONS, file=f"{name}.yaml", name=name,
        objective=OBJECTIVE, sampler={"name": "grid", "seed": None}, n_trials=2, batch_size=4,
        workdir=f".composer-{name}", llm=llm, stop=stop,
        judge={"metrics": ["faithfulness"], "fallback": fallback, "max_failure_share": share})
    exp = load_experiment(exp_file)
    result = CliRunner().invoke(app, ["optimize", str(exp_file)])
    study = optuna.load_study(study_name=name, storage=exp.storage_url)
    return exp, study, result.output


def error_rates(exp: ExperimentConfig, study: optuna.Study) -> dict[int, dict[str, Any]]:
    """Each trial's error_rates.json, from its MLflow run."""
    from mlflow import MlflowClient

    client = MlflowClient(exp.tracking_uri)
    experiment = client.get_experiment_by_name(exp.mlflow_experiment)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id],
                              filter_string=f"tags.`composer.study` = '{study.study_name}'")
    return {int(r.data.tags["composer.trial"]):
            json.loads(Path(client.download_artifacts(r.info.run_id, "error_rates.json")).read_text())
            for r in runs if r.data.tags["composer.role"] == "trial"}


@pytest.mark.slow
def test_rescued_samples_complete_the_trial_counted_as_judge_fallback(tmp_path: Path) -> None:
    weak = WeakJudge(ScriptedRAG(golds()))
    with FakeLLMServer(weak, count_tokens=tokenizer(MODEL)) as server:
        exp, study, output = run(tmp_path, server, "weak")
        trials = study.get_trials(deepcopy=False)
        assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"], output
        assert weak.malformed > 0
        records = [TrialRecord.of(t) for t in trials]
        shares = [r.metrics["judge_fallback"] for r in records if r is not None]
        assert len(shares) == 2 and all(0 < share < 1 for share in shares), shares
        # Every token the server read, failed and unparseable requests included, is in the study's line
        # "LLM: N requests sent (…), … T tokens": the trials', the selection re-score's and the test
        # request's (which the server leaves out of its counts).
        line = re.search(r"LLM: (\d+) requests sent .*?, (\d+) tokens", " ".join(output.split()))
        assert line is not None, output
        ping = sum(tokenizer(MODEL)(list(PING), "ok"))
        assert int(line[1]) == server.chat_requests + server.pings
        assert int(line[2]) == server.prompt_tokens + server.completion_tokens + server.pings * ping
        assert sum(r.llm_usage["llm_failed_requests_bad_response"] for r in records if r is not None) > 0
    rates = error_rates(exp, study)
    for t, share in zip(trials, shares, strict=True):
        llm = rates[t.number]["llm"]
        assert llm["failed_samples"] == 0 and llm["judge_fallback_share"] == pytest.approx(share)
        assert llm["judge_fallback_samples"] == round(share * N_QUESTIONS)
    board = CliRunner().invoke(app, ["trials", "weak", "-e", str(tmp_path / "weak.yaml")])
    assert board.exit_code == 0 and "judge fallback" in board.output, board.output
    assert f"{shares[0]:.0%}" in board.output
    page = render_report(study, exp)
    assert "judge_fallback" in page and f"{shares[0]:.3f}" in page


@pytest.mark.slow
def test_without_fallback_the_trial_fails_and_says_the_judge_failed(tmp_path: Path) -> None:
    rag = ScriptedRAG(golds())
    with FakeLLMServer(WeakJudge(rag)) as server:
        _, study, output = run(tmp_path, server, "strict", fallback=False)
    trials = study.get_trials(deepcopy=False)
    assert [t.state.name for t in trials] == ["FAIL", "FAIL"], output
    for trial in trials:
        record = TrialRecord.of(trial)
        assert record is not None and record.error is not None
        line = record.error.splitlines()
        assert len(line) == 1 and "the judge failed on " in line[0] and "of 8 samples" in line[0], line
        assert "failed to generate" not in line[0]
    # Each trial's first batch of 4 was already past the budget (none allowed): it stopped there, and
    # answered none of its second batch.
    assert rag.count("generate") == 2 * 4


@pytest.mark.slow
def test_a_dollar_budget_stops_on_the_tokens_of_failed_requests(tmp_path: Path) -> None:
    """Every request but the test request fails with a 500 (failed samples pass: ``max_failure_share``
    1): only their prompts cost, and they stop the study after its first batch."""

    def broken(req: ChatRequest) -> Reply | str:
        return "ok" if kind_of(req) == "ping" else server_error(500)

    with FakeLLMServer(broken, count_tokens=tokenizer(MODEL)) as server:
        _, study, output = run(tmp_path, server, "spent", share=1.0, stop={"max_cost_usd": 0.0005})
        assert "LLM budget spent" in " ".join(output.split()), output
        trials = study.get_trials(deepcopy=False)
        assert [fate_of(t) for t in trials] == ["budget"], output
        record = TrialRecord.of(trials[0])
        assert record is not None and record.llm_usage["llm_cost_usd"] >= 0.0005
        assert record.llm_usage["llm_prompt_tokens"] == server.prompt_tokens > 0
        assert server.chat_requests == 2 * 4  # the first batch, each question tried twice: no more
