"""``composer tune-prompt`` end to end against a scripted 127.0.0.1 server: the scripted generator answers
correctly only when the system prompt carries an instruction, and the scripted reflection model proposes
that instruction once it is shown failures. The optimized prompt wins on the held-out questions and is
registered as version 2; a reflection model that only proposes worse prompts leaves the seed; --estimate
sends nothing and bounds what the run sends; a rerun sends nothing; a study without a held-out split is
refused."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from fake_llm_server import ChatRequest, FakeLLMServer
from sample_study import write_experiment
from scripted_llm import ScriptedRAG, golds_of, kind_of
from typer.testing import CliRunner

from composer.cli.app import app

INSTRUCTION = "انقل الإجابة حرفيا من المقطع."
"""What the system prompt must carry for the scripted generator to answer with the exact gold phrase."""
WORSE = "أضف تعليقا طويلا."
"""What a worse proposal adds: the scripted generator then answers nothing of use."""
KEY_ENV = "COMPOSER_TUNE_PROMPT_TEST_KEY"
TUNING = {"max_proposals": 2, "max_metric_calls": 30, "minibatch": 4}


def scripted(golds: dict[str, str], proposal: str) -> tuple[Callable[[ChatRequest], str], list[str]]:
    """The route: reflection requests add ``proposal`` to the message they are shown (only once they are
    shown an answer that missed), answers depend on the system prompt, the judge is ScriptedRAG's."""
    rag = ScriptedRAG(golds)
    seen: list[str] = []

    def route(req: ChatRequest) -> str:
        if "I gave an assistant" in req.prompt:
            seen.append("reflection")
            current = re.search(r"```\n(.*?)\n```", req.prompt, re.S)
            assert current is not None
            text = current.group(1)
            shown_failures = "Answer given:" in req.prompt
            if "{question}" in text or not shown_failures:  # the user message: left as it is
                return f"```\n{text}\n```"
            return f"```\n{text} {proposal}\n```"
        if kind_of(req) == "generate" or INSTRUCTION in req.system or WORSE in req.system:
            seen.append("generate")
            gold = golds.get(rag.question_of(req) or "", "")
            if WORSE in req.system:
                return "لا تعليق"
            return gold if INSTRUCTION in req.system else f"{gold} وهذا ما ورد في السياق المقدم من المصادر"
        return str(rag(req))

    return route, seen


@pytest.fixture
def study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(KEY_ENV, "sk-tune-prompt-test")
    monkeypatch.chdir(tmp_path)
    yield tmp_path


def experiment(root: Path, url: str, **fields: object) -> Path:
    return write_experiment(
        root, dims={"retrieval.mode": {"choices": ["bm25"]}}, defaults={"retrieval": {"k": 3}},
        n_questions=20, n_trials=1, objective={"k": 3, "metrics": {"token_f1": 1}},
        split={"held_out": 0.4}, workdir="work", batch_size=20,
        llm={"model": "openai/fake", "api_base": url, "api_key_env": KEY_ENV},
        judge={"metrics": ["answer_correctness"]}, prompt_tuning=TUNING, **fields,
    )


def optimized(root: Path, proposal: str) -> tuple[FakeLLMServer, list[str], Path, CliRunner]:
    """A finished study over the scripted server, ready for tune-prompt."""
    golds = golds_of(Path(__file__).resolve().parents[2] / "examples" / "arcd-sample" / "questions.jsonl")
    route, seen = scripted(golds, proposal)
    server = FakeLLMServer(route).start()
    exp = experiment(root, server.url)
    runner = CliRunner()
    result = runner.invoke(app, ["optimize", str(exp)])
    assert result.exit_code == 0, result.output
    server.reset_counts()
    return server, seen, exp, runner


@pytest.mark.slow
def test_tune_prompt_finds_the_instruction_registers_version_2_and_a_rerun_sends_nothing(study: Path) -> None:
    server, seen, exp, runner = optimized(study, INSTRUCTION)
    try:
        foreseen = runner.invoke(app, ["tune-prompt", "-e", str(exp), "--estimate", "--json"])
        assert foreseen.exit_code == 0, foreseen.output
        assert server.stats()["chat_requests"] == 0  # --estimate sends nothing
        bound = json.loads(foreseen.stdout)["requests"]

        first = runner.invoke(app, ["tune-prompt", "-e", str(exp)])
        assert first.exit_code == 0, first.output
        sent = server.stats()["chat_requests"]
        assert 0 < sent <= bound
        assert "verdict: better" in first.stdout
        assert re.search(r"registered: prompts:/s\.answer/2\b", first.stdout), first.stdout
        reflections = sum("I gave an assistant" in r.prompt for r in server.received)
        counted = f"requests: prompt-proposal {reflections} · prompt-eval {sent - reflections}"
        assert reflections > 0 and counted in first.stdout, first.stdout  # the server's counts, by purpose
        assert "reflection" in seen

        server.reset_counts()
        again = runner.invoke(app, ["tune-prompt", "-e", str(exp)])
        assert again.exit_code == 0, again.output
        assert server.stats()["chat_requests"] == 0
        assert "verdict: better" in again.stdout and "prompts:/s.answer/2" in again.stdout

        report = runner.invoke(app, ["report", "-e", str(exp)])
        assert report.exit_code == 0, report.output
        page = (study / "work" / "s-report.html").read_text(encoding="utf-8")
        assert "The optimized prompt" in page and INSTRUCTION in page and "better" in page
    finally:
        server.stop()


@pytest.mark.slow
def test_only_worse_proposals_leave_the_seed_and_register_nothing(study: Path) -> None:
    server, _, exp, runner = optimized(study, WORSE)
    try:
        result = runner.invoke(app, ["tune-prompt", "-e", str(exp)])
        assert result.exit_code == 0, result.output
        assert "the seed stays" in result.stdout
        assert "registered:" not in result.stdout
    finally:
        server.stop()


def test_a_study_without_a_held_out_split_is_refused(study: Path) -> None:
    exp = write_experiment(study, n_questions=6, n_trials=1, workdir="work")
    runner = CliRunner()
    assert runner.invoke(app, ["optimize", str(exp)]).exit_code == 0
    result = runner.invoke(app, ["tune-prompt", "-e", str(exp)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "split:" in lines[0] and "held-out" in lines[0], result.output
