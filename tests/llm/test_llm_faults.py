"""The LLM client's second round of faults (issues 19.5, 19.7, 19.8 and 18.4), against the local fake
server: huge replies cut off and never cached, damaged cache rows dropped and asked again, an unusable
reply asked once with a repair instruction, and eval/synth stopping at a dead server or a missing key."""

from __future__ import annotations

import json
import os
import resource
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest
from fake_llm_server import ChatRequest, FakeLLMServer, Reply, huge
from typer.testing import CliRunner

from composer.cli.app import app
from composer.llm import LLMClient, LLMConfig, track_usage
from composer.llm.client import REPAIR

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arcd-sample"
KEY_ENV = "COMPOSER_TEST_ROUND2_KEY"
MB = 1_000_000


@pytest.fixture()
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(lambda req: f"reply to {req.prompt}") as srv:
        yield srv


def make_client(server: FakeLLMServer, cache_dir: Path, **overrides: object) -> LLMClient:
    settings: dict[str, object] = {
        "model": "openai/fake-model",
        "api_base": server.url,
        "timeout": 10.0,
        "backoff_base": 0.01,
        "backoff_max": 0.05,
        **overrides,
    }
    return LLMClient(LLMConfig.model_validate(settings), cache_dir=cache_dir)


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def peak_rss() -> int:
    """The process's peak resident memory, in bytes (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# -- 19.5: huge replies --


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_huge_replies_are_cut_off_counted_as_oversized_and_never_cached(
    server: FakeLLMServer, tmp_path: Path, chunked: bool
) -> None:
    reply = huge(10 * MB, chunked=chunked)  # built once: the server serves the same bytes every time
    server.route = lambda req: reply
    client = make_client(server, tmp_path, max_tokens=256, max_concurrency=4)
    before = peak_rss()
    with track_usage() as usage:
        results = client.complete_many([ask(f"question {i}") for i in range(20)])
    grown = peak_rss() - before
    assert all(r.error_kind == "oversized" and r.text is None for r in results)
    assert all("max_tokens allow" in (r.error or "") for r in results)  # the cause, not "Connection error"
    assert usage.failed_calls["oversized"] == 20
    assert usage.error_rates()["kinds"]["oversized"]["failed_calls"] == 20
    assert server.chat_requests == 40  # each asked once more, with the repair instruction, then given up
    assert client.cache is not None and len(client.cache) == 0
    assert grown < 200 * MB, f"peak memory grew {grown / MB:.0f} MB for 20 replies of 10 MB"


def test_a_reply_longer_than_max_tokens_allow_is_oversized_whatever_the_transport(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    """The body is small enough to read; its text is still far longer than 8 tokens can be."""
    server.route = lambda req: "word " * 2000
    client = make_client(server, tmp_path, max_tokens=8)
    result = client.complete(ask("be brief"))
    assert result.error_kind == "oversized" and "max_tokens" in (result.error or "")
    assert client.cache is not None and len(client.cache) == 0


# -- 19.7: damaged cache rows --


def test_damaged_cache_rows_are_dropped_asked_again_and_counted(
    server: FakeLLMServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    batch = [ask(f"question {i}") for i in range(7)]
    first = make_client(server, tmp_path)
    answers = [r.text for r in first.complete_many(batch)]
    assert first.cache is not None
    first.cache.close()
    cache_file = tmp_path / "replies.sqlite"
    keys = [k for (k,) in sqlite3.connect(cache_file).execute("SELECT key FROM replies ORDER BY rowid")]
    damage = [
        "UPDATE replies SET text = '' WHERE key = ?",
        "UPDATE replies SET text = '  \n ' WHERE key = ?",
        "UPDATE replies SET prompt_tokens = 'many' WHERE key = ?",
        "UPDATE replies SET completion_tokens = 2.5 WHERE key = ?",
        "UPDATE replies SET text = CAST(X'C328FF' AS TEXT) WHERE key = ?",  # invalid UTF-8
        "UPDATE replies SET cost = 'free' WHERE key = ?",
    ]
    with sqlite3.connect(cache_file) as conn:
        for sql, key in zip(damage, keys, strict=False):
            conn.execute(sql, (key,))
    server.reset_counts()
    with caplog.at_level("WARNING", logger="composer.llm.client"):
        again = make_client(server, tmp_path)
        results = again.complete_many(batch)
    assert [r.text for r in results] == answers  # the damaged rows were never served
    assert server.chat_requests == 6 and sum(r.cached for r in results) == 1
    assert again.usage.cache_rejected == 6 and again.usage.error_rates()["cache_rejected"] == 6
    assert again.usage.to_dict()["llm_cache_rejected"] == 6
    assert f"{cache_file}: a cached reply is unusable" in caplog.text
    third = make_client(server, tmp_path).complete_many(batch)  # the rows asked again were stored anew
    assert all(r.cached for r in third) and server.chat_requests == 6


def test_a_cached_reply_failing_the_callers_check_is_dropped_and_counted(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    server.route = lambda req: "not json at all"
    make_client(server, tmp_path).complete(ask("give json"))  # cached by a caller without a validator
    server.route = lambda req: '{"ok": 1}'
    client = make_client(server, tmp_path)
    result = client.complete(ask("give json"), validate=json.loads)
    assert result.ok and not result.cached and result.text == '{"ok": 1}'
    assert client.usage.cache_rejected == 1


# -- 19.8: unusable replies --


def test_an_unusable_reply_is_asked_once_with_a_repair_instruction_then_fails(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    server.route = lambda req: "Sure! Here is what you asked for."
    client = make_client(server, tmp_path, max_retries=5)
    result = client.complete(ask("Reply with a JSON object"), validate=json.loads)
    assert result.error_kind == "bad_response" and result.attempts == 2
    assert server.chat_requests == 2  # not 6 identical requests
    first, second = server.received
    assert first.messages == ask("Reply with a JSON object")
    assert second.messages[:1] == first.messages and len(second.messages) == 2
    assert second.messages[1]["role"] == "user" and "could not be used" in second.messages[1]["content"]
    assert client.usage.failed_calls["bad_response"] == 1 and client.usage.repaired == 0
    assert client.cache is not None and len(client.cache) == 0


def test_a_repaired_reply_is_counted_and_cached_for_the_original_request(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    def route(req: ChatRequest) -> str:
        return '{"queries": ["a"]}' if len(req.messages) > 1 else "I cannot do JSON"

    server.route = route
    client = make_client(server, tmp_path)
    question = "ما هي عاصمة مصر؟ أجب بكائن JSON فقط"
    result = client.complete(ask(question), validate=json.loads)
    assert result.ok and result.attempts == 2 and client.usage.repaired == 1
    assert client.usage.error_rates()["repaired_calls"] == 1
    repair = server.received[1].messages[1]["content"]
    assert repair.startswith(REPAIR["ar"].split("(")[0])  # in the prompt's language
    again = client.complete(ask(question), validate=json.loads)
    assert again.cached and server.chat_requests == 2


def test_an_echo_of_the_prompt_is_unusable(server: FakeLLMServer, tmp_path: Path) -> None:
    prompt = "Write a short passage that answers the question: when was Cairo University founded, and who?"

    def route(req: ChatRequest) -> Reply:
        return Reply("Cairo University was founded in 1908.") if len(req.messages) > 1 else Reply(req.prompt)

    server.route = route
    client = make_client(server, tmp_path)
    result = client.complete(ask(prompt))
    assert result.ok and result.text == "Cairo University was founded in 1908." and client.usage.repaired == 1
    assert client.usage.failed_attempts["bad_response"] == 1


# -- 18.4: eval and synth preflight --


@pytest.fixture()
def eval_files(tmp_path: Path) -> dict[str, Path]:
    lines = (EXAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    (tmp_path / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "pipeline.yaml").write_text("retrieval: {mode: bm25, k: 3}\n", encoding="utf-8")
    return {"questions": tmp_path / "questions.jsonl", "config": tmp_path / "pipeline.yaml"}


def closed_port_url() -> str:
    with FakeLLMServer() as srv:
        url = srv.url
    return url  # nothing listens there any more


def test_eval_with_a_dead_server_stops_before_any_work(eval_files: dict[str, Path], tmp_path: Path) -> None:
    url = closed_port_url()
    args = ["eval", str(eval_files["questions"]), "--corpus", str(EXAMPLE / "corpus.jsonl"), "--config",
            str(eval_files["config"]), "--workdir", str(tmp_path / "work"), "--llm", "openai/fake",
            "--llm-base", url, "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: the LLM openai/fake at {url} did not answer a test request "
                                    "before the evaluation started (connection:")
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_eval_and_synth_name_a_missing_api_key(
    eval_files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    evaluated = CliRunner().invoke(app, [
        "eval", str(eval_files["questions"]), "--corpus", str(EXAMPLE / "corpus.jsonl"), "--config",
        str(eval_files["config"]), "--workdir", str(tmp_path / "work"), "--llm", "openai/gpt-4o-mini"])
    synthesized = CliRunner().invoke(app, [
        "synth", str(EXAMPLE / "corpus.jsonl"), "--llm", "openai/gpt-4o-mini", "--n", "2",
        "--out", str(tmp_path / "set.jsonl"), "--workdir", str(tmp_path / "work")])
    for result in (evaluated, synthesized):
        assert result.exit_code == 2, result.output
        assert result.output.startswith("error: missing API key for the LLM openai/gpt-4o-mini: set "
                                        "OPENAI_API_KEY"), result.output
    assert not (tmp_path / "set.jsonl").exists()
    named = CliRunner().invoke(app, [
        "synth", str(EXAMPLE / "corpus.jsonl"), "--llm", "openai/gpt-4o-mini", "--llm-key-env", KEY_ENV,
        "--out", str(tmp_path / "set.jsonl"), "--workdir", str(tmp_path / "work")])
    assert named.exit_code == 2 and f"environment variable {KEY_ENV} is not set" in named.output


@pytest.mark.slow
def test_synth_with_a_dead_server_stops_at_the_test_request(tmp_path: Path) -> None:
    url = closed_port_url()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(
        [sys.executable, "-m", "composer", "synth", str(EXAMPLE / "corpus.jsonl"), "--llm", "openai/fake",
         "--llm-base", url, "--out", str(tmp_path / "set.jsonl"), "--workdir", str(tmp_path / "work")],
        capture_output=True, text=True, env=env, check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "did not answer a test request before generating questions (connection:" in done.stderr
    assert "Traceback" not in done.stderr and "never awaited" not in done.stderr
    assert not (tmp_path / "set.jsonl").exists()


def test_the_unawaited_coroutine_of_a_cancelled_litellm_call_is_not_reported() -> None:
    """litellm makes a call's coroutine in an executor thread: a call cancelled meanwhile leaves it
    unstarted, and Python would print a RuntimeWarning for it on the user's terminal."""
    script = (
        "import gc, warnings\n"
        "{setup}"
        "class OpenAIChatCompletion:\n"
        "    async def acompletion(self): pass\n"
        "pending = OpenAIChatCompletion().acompletion()\n"
        "del pending; gc.collect()\n"
    )
    quiet = subprocess.run([sys.executable, "-c", script.format(setup="import composer.llm.client\n")],
                           capture_output=True, text=True, check=True)
    loud = subprocess.run([sys.executable, "-c", script.format(setup="")],
                          capture_output=True, text=True, check=True)
    assert "never awaited" in loud.stderr  # the control: Python does warn
    assert "never awaited" not in quiet.stderr
