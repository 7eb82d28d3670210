"""`composer optimize --estimate` (and ``composer.optimize(..., estimate=True)``): the study's LLM calls,
tokens and dollars per stage before it runs, without a request but the test requests that time it;
within 25% of what the study then spends against a scripted server that bills tokens as a provider
does (with the model's tokenizer); set beside the actual after the study; calls already cached or
already run subtracted."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import ChatRequest, FakeLLMServer, Reply
from sample_study import write_experiment, write_questions
from scripted_llm import ScriptedRAG, golds_of
from typer.testing import CliRunner

import composer
from composer.cli.app import app
from composer.cost.estimate import Estimate
from composer.llm.pricing import count_text_tokens, count_tokens

MODEL = "openai/fake"
DEFAULTS = {"retrieval": {"mode": "bm25"}, "query_expansion": {"n": 2}}
DIMS = {"generation.template": {"choices": ["grounded", "concise"]}, "retrieval.k": {"choices": [2, 4]},
        "query_expansion.method": {"choices": ["multi_query"]}}
FIELDS: dict[str, Any] = {
    "name": "priced",
    "objective": {"k": 3, "metrics": {"recall": 1, "answer_correctness": 1, "faithfulness": 1}},
    "split": {"held_out": 0.4, "seed": 0}, "sampler": {"name": "grid", "seed": None}, "n_trials": 4,
    "batch_size": 10, "workdir": "work", "judge": {"metrics": ["answer_correctness", "faithfulness"]},
}


class Billing:
    """The scripted RAG model, billing prompt and reply tokens with the model's tokenizer at the
    experiment's price (USD per million tokens)."""

    def __init__(self, route: ScriptedRAG) -> None:
        self.route = route
        self.usd = 0.0
        self._lock = threading.Lock()

    def __call__(self, req: ChatRequest) -> Reply:
        reply = self.route(req)
        text = reply if isinstance(reply, str) else reply.content
        prompt, completion = count_tokens(MODEL, req.messages), count_text_tokens(MODEL, text)
        with self._lock:
            self.usd += (prompt * 150.0 + completion * 600.0) / 1e6
        return Reply(content=text, prompt_tokens=prompt, completion_tokens=completion)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeLLMServer, Path]]:
    root = tmp_path_factory.mktemp("priced")
    golds = golds_of(write_questions(root, 15))
    with FakeLLMServer(Billing(ScriptedRAG(golds))) as srv:
        write_experiment(root, dims=DIMS, defaults=DEFAULTS, n_questions=15, file="exp.yaml", **FIELDS,
                         llm={"model": MODEL, "api_base": srv.url,
                              "price": {"input": 150.0, "output": 600.0}})
        yield srv, root


def estimated(root: Path, *extra: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["optimize", str(root / "exp.yaml"), "--estimate", "--json", *extra])
    assert result.exit_code == 0, result.output
    out: dict[str, Any] = json.loads(result.stdout)
    return out


@pytest.mark.slow
def test_the_estimate_sends_nothing_and_comes_within_25_percent_of_the_study(
    setup: tuple[FakeLLMServer, Path],
) -> None:
    srv, root = setup
    billing = srv.route
    assert isinstance(billing, Billing)
    est = estimated(root)
    assert srv.chat_requests == 0 and srv.pings == 2  # only the two test requests that time it
    srv.reset_counts()
    stages = {s["stage"]: s for s in est["stages"]}
    assert {"query expansion", "generation", "judge: answer_correctness", "judge: faithfulness"} <= set(
        stages)
    assert stages["generation"]["calls_per_question"] == 1.0
    assert stages["query expansion"]["calls_per_question"] == 0.25  # once a question, for 4 configurations
    assert est["trials"] == 4 and est["configurations"] == 4 and est["preflight"] == 1
    cheapest, dearest = est["cheapest"], est["dearest"]
    assert isinstance(cheapest, dict) and isinstance(dearest, dict)
    assert cheapest["params"]["retrieval.k"] == 2 and dearest["params"]["retrieval.k"] == 4
    assert dearest["usd_per_trial"] > cheapest["usd_per_trial"] > 0

    ran = CliRunner().invoke(app, ["optimize", str(root / "exp.yaml")])
    assert ran.exit_code == 0, ran.output
    actual_requests, actual_usd = srv.chat_requests + srv.pings, billing.usd
    assert isinstance(est["requests"], float) and isinstance(est["usd"], float)
    print(f"\nestimate {est['requests']:.0f} requests ${est['usd']:.4f}; actual {actual_requests} "
          f"${actual_usd:.4f}")
    assert abs(est["requests"] - actual_requests) <= 0.25 * actual_requests
    assert abs(est["usd"] - actual_usd) <= 0.25 * actual_usd
    assert "LLM estimate vs actual: " in ran.output

    again = estimated(root)  # the study is done: only the test request is left to send
    assert again["trials"] == 0 and again["finished"] == 4 and again["requests"] == 1.0
    other = estimated(root, "--study-name", "another")  # a new study in the same work dir
    assert isinstance(other["cached"], float) and other["cached"] > 0
    assert isinstance(other["requests"], float) and other["requests"] < est["requests"]


def test_the_api_returns_a_typed_estimate_and_the_table_names_every_stage(
    setup: tuple[FakeLLMServer, Path],
) -> None:
    srv, root = setup
    before = srv.chat_requests
    est = composer.optimize(str(root / "exp.yaml"), estimate=True, name="typed")
    assert isinstance(est, Estimate) and est.usd is not None and est.usd_per_trial is not None
    assert est.study == "typed" and est.questions == 9 and est.held_out == 6
    assert srv.chat_requests == before and est.seconds is not None  # test requests only, which time it
    table = CliRunner().invoke(app, ["optimize", str(root / "exp.yaml"), "--estimate", "--study-name", "t2"])
    assert table.exit_code == 0, table.output
    alone = CliRunner().invoke(app, ["optimize", str(root / "exp.yaml"), "--json"])
    assert alone.exit_code == 2 and "give --estimate too" in alone.output
    for words in ("LLM cost estimate", "generation", "judge: faithfulness", "query expansion", "cheapest:",
                  "dearest:", "per trial:"):
        assert words in table.output, words
