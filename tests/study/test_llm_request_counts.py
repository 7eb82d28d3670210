"""Every LLM request of a study counted by purpose (preflight, trial, held-out and selection re-scores),
in the summary, the terminal and the parent MLflow run, its total equal to the requests the scripted
server saw; a rerun of the finished study sends nothing but the preflight and repeats its verdict;
`composer eval` and `composer synth` count theirs too."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import FakeLLMServer
from sample_study import SAMPLE, write_experiment, write_questions
from scripted_llm import ScriptedRAG, golds_of
from scripted_synth import ScriptedSynth
from typer.testing import CliRunner

from composer.cli.app import app
from composer.data import load_corpus
from composer.study.experiment import load_experiment

DEFAULTS = {"retrieval": {"mode": "bm25", "k": 3}}
DIMS = {"generation.template": {"choices": ["grounded", "concise"]},
        "query_expansion.method": {"choices": ["none", "multi_query"]}}
FIELDS: dict[str, Any] = {
    "name": "counted",
    "objective": {"k": 3, "metrics": {"recall": 1, "answer_correctness": 1, "faithfulness": 1}},
    "split": {"held_out": 0.4, "seed": 0}, "sampler": {"name": "grid", "seed": None}, "n_trials": 3,
    "batch_size": 10, "workdir": "work", "judge": {"metrics": ["answer_correctness", "faithfulness"]},
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeLLMServer, Path]]:
    root = tmp_path_factory.mktemp("counted")
    golds = golds_of(write_questions(root, 15))
    with FakeLLMServer(ScriptedRAG(golds)) as srv:
        write_experiment(root, dims=DIMS, defaults=DEFAULTS, n_questions=15, file="exp.yaml", **FIELDS,
                         llm={"model": "openai/fake", "api_base": srv.url,
                              "price": {"input": 1.0, "output": 2.0}})
        yield srv, root


def optimize(root: Path) -> str:
    result = CliRunner().invoke(app, ["optimize", str(root / "exp.yaml")])
    assert result.exit_code == 0, result.output
    return result.output


def parent_run(root: Path) -> tuple[dict[str, float], dict[str, object]]:
    """The latest study run's metrics and its study_summary.json."""
    from mlflow import MlflowClient

    exp = load_experiment(root / "exp.yaml")
    client = MlflowClient(exp.tracking_uri)
    experiment = client.get_experiment_by_name(exp.mlflow_experiment)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.`composer.role` = 'study'",
                              order_by=["attributes.start_time DESC"])
    run = runs[0]
    summary = json.loads(Path(client.download_artifacts(run.info.run_id, "study_summary.json")).read_text())
    return run.data.metrics, summary


@pytest.mark.slow
def test_every_request_is_counted_by_purpose_and_a_rerun_sends_only_the_preflight(
    server: tuple[FakeLLMServer, Path],
) -> None:
    srv, root = server
    first = optimize(root)
    seen = srv.chat_requests + srv.pings
    metrics, summary = parent_run(root)
    by_purpose = summary["llm_by_purpose"]
    assert isinstance(by_purpose, dict)
    assert list(by_purpose) == ["preflight", "trial", "selection", "held_out"]
    assert by_purpose["preflight"]["llm_requests"] == srv.pings == 1
    assert by_purpose["held_out"]["llm_requests"] > 0  # the held-out questions were never asked before
    assert by_purpose["selection"]["llm_requests"] == 0  # the trials' own calls: all cached
    assert metrics["llm_requests"] == seen  # what the server saw, to the request
    assert sum(metrics[f"llm_requests_{p}"] for p in by_purpose) == seen
    assert metrics["llm_cost_usd"] == pytest.approx(sum(u["llm_cost_usd"] for u in by_purpose.values()))
    estimate = summary["llm_estimate"]  # made before the first trial, beside the actual
    assert isinstance(estimate, dict) and metrics["llm_requests_estimated"] == estimate["llm_requests"] > 0
    assert "LLM estimate vs actual: " in first
    assert f"LLM: {seen} requests sent (preflight 1 · trial " in first
    verdict = [line for line in first.splitlines() if line.startswith("held-out (")]
    assert verdict

    again = optimize(root)
    assert srv.chat_requests + srv.pings == seen + 1  # the preflight, nothing else
    assert [line for line in again.splitlines() if line.startswith("held-out (")] == verdict
    metrics, summary = parent_run(root)  # the study's requests in both runs: the rerun added one
    again_by_purpose = summary["llm_by_purpose"]
    assert isinstance(again_by_purpose, dict)
    assert again_by_purpose["preflight"]["llm_requests"] == 2
    assert {p: u for p, u in again_by_purpose.items() if p != "preflight"} == {
        p: u for p, u in by_purpose.items() if p != "preflight"}
    assert metrics["llm_requests"] == srv.chat_requests + srv.pings

    exported = root / "best.yaml"
    done = CliRunner().invoke(app, ["export", "-e", str(root / "exp.yaml"), "--out", str(exported)])
    assert done.exit_code == 0, done.output
    before = srv.chat_requests + srv.pings
    scored = CliRunner().invoke(app, [
        "eval", str(root / "questions.jsonl"), "--corpus", str(SAMPLE / "corpus.jsonl"), "--config",
        str(exported), "--workdir", str(root / "work"), "--metrics", "answer_correctness", "--json"])
    assert scored.exit_code == 0, scored.output
    eval_by_purpose = json.loads(scored.stdout)["llm_by_purpose"]
    assert eval_by_purpose["preflight"]["llm_requests"] == 1
    sent = sum(u["llm_requests"] for u in eval_by_purpose.values())
    assert sent == srv.chat_requests + srv.pings - before == 1  # the winner answered every question before
    assert eval_by_purpose["eval"]["llm_calls"] > 0 == eval_by_purpose["eval"]["llm_requests"]


def test_synth_counts_its_test_request_and_its_generation(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join((SAMPLE / "corpus.jsonl").read_text(encoding="utf-8").splitlines(True)[:12]),
                      encoding="utf-8")
    with FakeLLMServer(ScriptedSynth(load_corpus(corpus))) as srv:
        result = CliRunner().invoke(app, [
            "synth", str(corpus), "--n", "4", "--llm", "openai/writer", "--llm-base", srv.url, "--out",
            str(tmp_path / "q.jsonl"), "--workdir", str(tmp_path / "work"), "--json"])
        assert result.exit_code == 0, result.output
        by_purpose = json.loads(result.stdout)["llm_by_purpose"]
        assert by_purpose["preflight"]["llm_requests"] == srv.pings == 1
        assert by_purpose["synth"]["llm_requests"] == srv.chat_requests > 0
