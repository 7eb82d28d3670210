"""`optimize --estimate` times the study (issue 42): a self-hosted model costs $0, so dollars say nothing
of how long it runs; the estimate times every model's requests by the latency of a test request (the
faster of two, its only requests), over the model's max_concurrency, and prints it beside the dollars.
A model whose test request is not answered is priced but untimed, and named."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import json
from pathlib import Path
from typing import Any

from fake_llm_server import FakeLLMServer
from sample_study import write_experiment, write_questions
from scripted_llm import ScriptedRAG
from typer.testing import CliRunner

from composer.cli.app import app
from composer.data import load_questions

LATENCY, CONCURRENCY = 0.3, 2
FIELDS: dict[str, Any] = {
    "name": "local",
    "objective": {"k": 3, "metrics": {"recall": 1, "answer_correctness": 1}},
    "sampler": {"name": "grid", "seed": None}, "n_trials": 2, "batch_size": 4, "workdir": "work",
    "judge": {"metrics": ["answer_correctness"]},
}
DIMS = {"generation.template": {"choices": ["grounded", "concise"]}}


def _experiment(root: Path, api_base: str) -> Path:
    return write_experiment(
        root, dims=DIMS, defaults={"retrieval": {"mode": "bm25", "k": 3}}, n_questions=8, **FIELDS,
        llm={"model": "openai/smol", "api_base": api_base, "max_concurrency": CONCURRENCY, "max_retries": 0,
             "price": {"input": 0.0, "output": 0.0}},
    )


def test_a_free_self_hosted_model_is_timed_from_its_test_request(tmp_path: Path) -> None:
    golds = {q.question: q.gold_answers[0] for q in load_questions(write_questions(tmp_path, 8))}
    with FakeLLMServer(ScriptedRAG(golds), latency=LATENCY) as srv:
        exp = _experiment(tmp_path, srv.url)
        done = CliRunner().invoke(app, ["optimize", str(exp), "--estimate", "--json"])
        assert done.exit_code == 0, done.output
        table = CliRunner().invoke(app, ["optimize", str(exp), "--estimate"])
        assert srv.pings == 4 and srv.chat_requests == 0  # two test requests per estimate, nothing else
    assert table.exit_code == 0, table.output
    est = json.loads(done.stdout)
    assert est["usd"] == 0.0 and est["untimed"] == []
    requests = (est["cheapest"]["requests_per_trial"] + est["dearest"]["requests_per_trial"]) / 2
    assert requests > 8  # 8 answers, and their judges' requests
    # a request takes the server's latency (plus the client's own time), CONCURRENCY at once
    assert requests * LATENCY / CONCURRENCY <= est["seconds_per_trial"] <= requests * 1.0 / CONCURRENCY
    pace = est["seconds_per_trial"] / requests  # the study's requests are timed alike
    assert abs(est["seconds"] - (est["requests"] - est["preflight"]) * pace) < 0.01 * est["seconds"]
    assert est["seconds"] > est["seconds_per_trial"]  # two trials, sharing their judges' cached verdicts
    assert "$0.0000, about " in table.output and " s (mean of 2 configurations)" in table.output


def test_a_model_that_does_not_answer_is_priced_but_untimed(tmp_path: Path) -> None:
    with FakeLLMServer() as srv:
        dead = srv.url  # nothing listens here once the server is stopped
    exp = _experiment(tmp_path, dead)
    done = CliRunner().invoke(app, ["optimize", str(exp), "--estimate"])
    assert done.exit_code == 0, done.output
    assert "no time for openai/smol" in done.output and "about" not in done.output
    assert "$0.0000" in done.output
