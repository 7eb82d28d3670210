"""The LLM client through litellm against the local fake server: retries, bounds, cache, cost, secrets."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import openai
import pytest
from fake_llm_server import (
    ChatRequest,
    FakeLLMServer,
    Reply,
    fake_embedding,
    hang,
    malformed,
    rate_limited,
    server_error,
)

from composer.errors import ConfigError
from composer.llm import LLMCache, LLMClient, LLMConfig, TokenPrice, helper_config, scrub, track_usage
from composer.llm.faults import classify, retry_after

KEY_ENV = "COMPOSER_TEST_LLM_KEY"
KEY = "sk-test-Zq8LmN4pR7sT2vW9xY3"


@pytest.fixture()
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(lambda req: f"echo: {req.prompt}") as srv:
        yield srv


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


def make_client(server: FakeLLMServer, cache_dir: Path, **overrides: object) -> LLMClient:
    settings: dict[str, object] = {
        "model": "openai/fake-model",
        "api_base": server.url,
        "api_key_env": KEY_ENV,
        "timeout": 5.0,
        "backoff_base": 0.02,
        "backoff_max": 0.2,
        **overrides,
    }
    return LLMClient(LLMConfig.model_validate(settings), cache_dir=cache_dir)


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_reply_tokens_and_custom_price(server: FakeLLMServer, tmp_path: Path) -> None:
    server.route = lambda req: Reply("bonjour", prompt_tokens=1200, completion_tokens=300)
    client = make_client(server, tmp_path, price={"input": 2.0, "output": 10.0})
    result = client.complete(ask("hello"))
    assert result.ok and result.text == "bonjour" and result.attempts == 1
    assert (result.prompt_tokens, result.completion_tokens) == (1200, 300)
    assert result.cost == pytest.approx((1200 * 2.0 + 300 * 10.0) / 1e6)
    assert client.usage.cost == pytest.approx(0.0054)
    assert client.usage.total_tokens == 1500 and client.usage.unpriced == 0
    # The request carried the key and our sampling parameters, and went through litellm's OpenAI route.
    request = server.received[0]
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.body["temperature"] == 0.0 and request.body["max_tokens"] == 1024
    assert request.model == "fake-model"


def test_unknown_model_without_price_counts_as_unpriced(server: FakeLLMServer, tmp_path: Path) -> None:
    client = make_client(server, tmp_path)
    result = client.complete(ask("hi"))
    assert result.ok and result.cost is None
    assert client.usage.unpriced == 1 and client.usage.cost == 0.0


def test_retries_429_honouring_retry_after(server: FakeLLMServer, tmp_path: Path) -> None:
    server.enqueue(rate_limited(0.3), rate_limited(0.3))
    client = make_client(server, tmp_path)
    started = time.monotonic()
    result = client.complete(ask("rate me"))
    elapsed = time.monotonic() - started
    assert result.ok and result.attempts == 3
    assert server.chat_requests == 3 and server.statuses == [429, 429, 200]
    assert elapsed >= 0.6  # waited as told, not the 20 ms backoff
    assert client.usage.failed_attempts["rate_limit"] == 2
    assert sum(client.usage.failed_calls.values()) == 0 and client.usage.requests == 3


def test_a_rate_limit_pauses_the_whole_client(server: FakeLLMServer, tmp_path: Path) -> None:
    """After a 429 with Retry-After, no new request leaves until the wait is over, not only its retry.

    The other request of the first pair answers slowly, so the 429 is known before any slot frees: a request
    that left before the client saw the 429 cannot be held back, and is not what this checks.
    """
    server.enqueue(rate_limited(0.4))
    server.route = lambda req: Reply("ok", delay=0.2)
    client = make_client(server, tmp_path, max_concurrency=2)
    results = client.complete_many([ask(f"burst {i}") for i in range(6)])
    assert all(r.ok for r in results) and server.chat_requests == 7 and server.statuses[0] == 429
    arrivals = sorted(r.arrived for r in server.received)
    assert arrivals[2] - arrivals[0] >= 0.38  # only the two first requests went out before the pause


def test_a_rate_limit_during_the_pause_extends_it(server: FakeLLMServer, tmp_path: Path) -> None:
    """Requests already waiting out a pause wait again when a later 429 asks for longer."""
    server.enqueue(rate_limited(0.3), replace(rate_limited(0.6), delay=0.15))
    client = make_client(server, tmp_path, max_concurrency=2)
    results = client.complete_many([ask(f"burst {i}") for i in range(4)])
    assert all(r.ok for r in results) and server.statuses[:2] == [429, 429]
    arrivals = sorted(r.arrived for r in server.received)
    assert arrivals[2] - arrivals[0] >= 0.73  # the 429 answered at 0.15 s moved the end to 0.75 s


def test_retries_server_errors_timeouts_and_malformed_bodies(server: FakeLLMServer, tmp_path: Path) -> None:
    server.enqueue(server_error(500), server_error(503), hang(2.0), malformed())
    client = make_client(server, tmp_path, timeout=0.5)
    result = client.complete(ask("flaky"))
    assert result.ok and result.text == "echo: flaky" and result.attempts == 5
    assert server.chat_requests == 5
    failed = client.usage.failed_attempts
    assert (failed["server_error"], failed["timeout"], failed["bad_response"]) == (2, 1, 1)
    rates = client.usage.error_rates()
    assert rates["failed_requests"] == 4 and rates["requests"] == 5 and rates["failed_calls"] == 0
    assert rates["kinds"]["server_error"]["request_rate"] == pytest.approx(2 / 5)


def test_gives_up_after_max_retries_and_does_not_cache_failures(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    server.enqueue(*[server_error() for _ in range(3)])
    client = make_client(server, tmp_path, max_retries=2)
    result = client.complete(ask("down"))
    assert not result.ok and result.error_kind == "server_error" and result.attempts == 3
    assert server.chat_requests == 3
    assert client.usage.failed_calls["server_error"] == 1
    assert client.usage.error_rates()["call_failure_rate"] == 1.0
    again = client.complete(ask("down"))  # the server is back: the failure was not cached
    assert again.ok and not again.cached and server.chat_requests == 4


def test_keyless_local_servers_work(
    server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM or llama.cpp without a key: the OpenAI SDK still wants one, so a placeholder is sent."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    client = LLMClient(LLMConfig(model="openai/local", api_base=server.url), cache_dir=tmp_path)
    assert client.complete(ask("hi")).ok
    assert server.received[0].headers["authorization"] == "Bearer no-key"


def test_sdk_side_errors_are_not_retried() -> None:
    """litellm reports an SDK error raised before any request (no key) as a 500; it is no server error."""

    class WrappedAs500(Exception):
        status_code = 500

    try:
        try:
            raise openai.OpenAIError("Missing credentials. Please pass an `api_key`")
        except openai.OpenAIError as root:
            raise WrappedAs500("litellm.InternalServerError: Missing credentials") from root
    except WrappedAs500 as exc:
        assert classify(exc) == "other"
    real = WrappedAs500("litellm.InternalServerError: The server had an error")
    assert classify(real) == "server_error"


def test_client_errors_are_not_retried(server: FakeLLMServer, tmp_path: Path) -> None:
    server.enqueue(Reply(status=400, raw_body=b'{"error": {"message": "bad request"}}'))
    client = make_client(server, tmp_path)
    result = client.complete(ask("x"))
    assert result.error_kind == "other" and result.attempts == 1 and server.chat_requests == 1


def test_connection_errors_are_counted(tmp_path: Path) -> None:
    with FakeLLMServer() as srv:
        url = srv.url
    # The server is gone: nothing listens on its port any more.
    config = LLMConfig(model="openai/m", api_base=url, api_key_env=KEY_ENV, max_retries=1, backoff_base=0.01)
    client = LLMClient(config, cache_dir=tmp_path)
    result = client.complete(ask("anyone?"))
    assert result.error_kind == "connection" and result.attempts == 2
    assert client.usage.failed_attempts["connection"] == 2


def test_concurrency_bound_is_respected(server: FakeLLMServer, tmp_path: Path) -> None:
    server.latency = 0.1
    client = make_client(server, tmp_path, max_concurrency=4)
    results = client.complete_many([ask(f"q{i}") for i in range(20)])
    assert all(r.ok for r in results)
    assert [r.text for r in results] == [f"echo: q{i}" for i in range(20)]
    assert server.max_in_flight == 4


def test_rerun_is_served_from_the_cache(server: FakeLLMServer, tmp_path: Path) -> None:
    batch = [ask(f"question {i}") for i in range(6)]
    first = make_client(server, tmp_path, price={"input": 1.0, "output": 1.0})
    assert all(r.ok and not r.cached for r in first.complete_many(batch))
    assert server.chat_requests == 6
    # A new client (a resumed study) on the same cache directory pays for nothing.
    second = make_client(server, tmp_path, price={"input": 1.0, "output": 1.0})
    results = second.complete_many(batch)
    assert server.chat_requests == 6
    assert all(r.cached and r.cost == 0.0 for r in results)
    assert [r.text for r in results] == [f"echo: question {i}" for i in range(6)]
    assert second.usage.cached == 6 and second.usage.requests == 0 and second.usage.cost == 0.0


def test_an_unreadable_cache_is_moved_aside_and_the_replies_come_back_the_same(
    server: FakeLLMServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    batch = [ask(f"question {i}") for i in range(6)]
    first = [r.text for r in make_client(server, tmp_path).complete_many(batch)]
    first_client = make_client(server, tmp_path)
    assert first_client.cache is not None
    first_client.cache.close()  # as at the end of a process: SQLite folds its log into the file
    with (tmp_path / "replies.sqlite").open("r+b") as f:
        f.write(b"\x00garbage" * 400)
    with caplog.at_level("WARNING", logger="composer.store"):
        again = make_client(server, tmp_path).complete_many(batch)
    assert f"{tmp_path / 'replies.sqlite'} is unreadable" in caplog.text
    assert [r.text for r in again] == first and not any(r.cached for r in again)
    assert server.chat_requests == 12  # asked again, once each: the new cache holds them
    assert all(r.cached for r in make_client(server, tmp_path).complete_many(batch))


def test_cache_key_includes_sampling_parameters(server: FakeLLMServer, tmp_path: Path) -> None:
    client = make_client(server, tmp_path)
    client.complete(ask("same prompt"))
    client.complete(ask("same prompt"), temperature=0.7)
    client.complete(ask("same prompt"), temperature=0.7)
    assert server.chat_requests == 2
    assert server.received[1].body["temperature"] == 0.7


def test_cache_off(server: FakeLLMServer, tmp_path: Path) -> None:
    client = make_client(server, tmp_path, cache=False)
    client.complete(ask("a"))
    client.complete(ask("a"))
    assert server.chat_requests == 2 and client.cache is None


def test_unusable_replies_are_retried_and_never_cached(server: FakeLLMServer, tmp_path: Path) -> None:
    server.enqueue(Reply("Sure! Here is the JSON you asked for"))
    server.route = lambda req: '{"ok": true}'
    client = make_client(server, tmp_path)
    result = client.complete(ask("json please"), validate=json.loads)
    assert result.ok and json.loads(result.text or "") == {"ok": True} and result.attempts == 2
    assert client.usage.failed_attempts["bad_response"] == 1
    assert client.complete(ask("json please"), validate=json.loads).cached
    assert server.chat_requests == 2


def test_empty_reply_is_a_bad_response(server: FakeLLMServer, tmp_path: Path) -> None:
    server.enqueue(Reply(""))
    client = make_client(server, tmp_path)
    assert client.complete(ask("speak")).attempts == 2
    assert client.usage.failed_attempts["bad_response"] == 1


def test_usage_tracking_scopes_nest(server: FakeLLMServer, tmp_path: Path) -> None:
    client = make_client(server, tmp_path)
    with track_usage() as outer:
        client.complete(ask("one"))
        with track_usage() as inner:
            client.complete_many([ask("two"), ask("three")])
            client.complete(ask("one"))  # cached
    client.complete(ask("four"))
    assert (outer.calls, outer.requests, outer.cached) == (4, 3, 1)
    assert (inner.calls, inner.requests, inner.cached) == (3, 2, 1)
    assert client.usage.calls == 5


def test_usage_tracking_follows_each_thread(server: FakeLLMServer, tmp_path: Path) -> None:
    """Two trials in two threads (Optuna n_jobs=2) each count only their own calls."""
    client = make_client(server, tmp_path)
    counts: dict[str, int] = {}

    def trial(name: str, n: int) -> None:
        with track_usage() as usage:
            client.complete_many([ask(f"{name}-{i}") for i in range(n)])
        counts[name] = usage.calls

    threads = [threading.Thread(target=trial, args=("a", 3)), threading.Thread(target=trial, args=("b", 5))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counts == {"a": 3, "b": 5}


def test_keys_never_reach_logs_reprs_or_errors(
    server: FakeLLMServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever logger a record comes from, and whoever filtered it first, the key is gone before any handler.

    litellm is imported before the client exists (as in a full run): its own redaction filter on "LiteLLM"
    then comes first, and child loggers ("openai._base_client", "httpx._client") have no filter at all.
    """
    import litellm  # noqa: F401

    caplog.set_level(logging.DEBUG)
    for name in ("LiteLLM", "litellm", "httpx", "openai"):
        caplog.set_level(logging.DEBUG, logger=name)

    def echo_key(req: ChatRequest) -> Reply:
        body = {"error": {"message": f"Incorrect API key provided: {req.headers['authorization'][7:]}"}}
        return Reply(status=401, raw_body=json.dumps(body).encode())

    server.route = echo_key
    client = make_client(server, tmp_path)
    result = client.complete(ask("who am I"))
    assert result.error_kind == "other" and result.error is not None
    assert "Incorrect API key" in result.error and "***" in result.error
    logging.getLogger("LiteLLM").warning("provider said: key %s rejected", KEY)
    logging.getLogger("openai._base_client").debug("child logger: key %s rejected", KEY)
    try:
        raise RuntimeError(f"Incorrect API key provided: {KEY}")
    except RuntimeError:
        logging.getLogger("httpx._client").exception("request failed")
    server.route = lambda req: "fine"
    client.complete(ask("again"))
    visible = [caplog.text, repr(client), repr(client.config), repr(result), str(result.error)]
    visible += [json.dumps(client.config.model_dump()), repr(client.usage)]
    assert all(KEY not in text for text in visible)
    assert "provider said: key *** rejected" in caplog.text
    assert "child logger: key *** rejected" in caplog.text
    assert "RuntimeError: Incorrect API key provided: ***" in caplog.text


def test_key_pasted_into_config_is_refused_without_echo() -> None:
    with pytest.raises(ValueError) as info:
        LLMConfig(model="openai/x", api_key_env=KEY)
    assert KEY not in str(info.value)
    with pytest.raises(ValueError, match="api_key_env"):
        LLMConfig(model="openai/x", params={"api_key": KEY})


def test_missing_key_variable_is_a_clear_error(tmp_path: Path) -> None:
    config = LLMConfig(model="openai/x", api_key_env="COMPOSER_NO_SUCH_VARIABLE")
    with pytest.raises(ConfigError, match="COMPOSER_NO_SUCH_VARIABLE is not set"):
        LLMClient(config, cache_dir=tmp_path)


def test_scrub_removes_key_shapes() -> None:
    text = "Authorization: Bearer abcdefghijklmnop, key=sk-proj-1234567890abcdef"
    assert scrub(text) == "Authorization: Bearer ***, key=***"


def test_judge_config_inherits_and_pins_temperature() -> None:
    llm = LLMConfig(
        model="openai/gen", api_base="http://127.0.0.1:1/v1", api_key_env=KEY_ENV, temperature=0.7
    )
    same = helper_config(llm)
    assert same is not None and same.model == "openai/gen" and same.temperature == 0.0
    sibling = helper_config(llm, "openai/judge")
    assert sibling is not None and sibling.api_base == llm.api_base and sibling.model == "openai/judge"
    other = helper_config(llm, "anthropic/claude-x")
    assert other is not None and other.api_base is None and other.api_key_env is None
    assert other.timeout == llm.timeout
    assert helper_config(None, None) is None
    explicit = helper_config(None, LLMConfig(model="openai/j", temperature=1.0))
    assert explicit is not None and explicit.temperature == 0.0


def test_price_arithmetic() -> None:
    assert TokenPrice(input=0.15, output=0.6).cost(1_000_000, 500_000) == pytest.approx(0.45)


def test_retry_after_accepts_seconds_and_http_dates() -> None:
    class Failure(Exception):
        def __init__(self, headers: dict[str, str]) -> None:
            super().__init__("429")
            self.litellm_response_headers = headers

    assert retry_after(Failure({"Retry-After": "2.5"})) == 2.5
    future = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    waited = retry_after(Failure({"retry-after": future}))
    assert waited is not None and 25 < waited <= 31
    assert retry_after(Failure({})) is None


def test_cache_is_shared_safely_across_processes(tmp_path: Path) -> None:
    """Two processes write the same SQLite cache at once (WAL + busy timeout): no write is lost."""
    script = (
        "import sys\n"
        "from composer.llm.cache import CachedReply, LLMCache\n"
        "cache = LLMCache(sys.argv[1])\n"
        "for i in range(200):\n"
        "    cache.put(f'{sys.argv[2]}-{i}', 'm', CachedReply(f'text {i}', 1, 1, 0.0))\n"
    )
    path = tmp_path / "replies.sqlite"
    root = Path(__file__).resolve().parents[2]
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(path), name], cwd=root)
        for name in ("a", "b", "c")
    ]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    cache = LLMCache(path)
    assert len(cache) == 600
    hit = cache.get("b-199")
    assert hit is not None and hit.text == "text 199"


def test_fake_server_serves_embeddings_through_litellm(server: FakeLLMServer) -> None:
    """The same server backs litellm embedding providers (e.g. the EMBED helper's litellm provider)."""
    import litellm

    texts = ["مادرید", "Madrid is the capital"]
    response = litellm.embedding(model="openai/fake-embedder", input=texts, api_base=server.url, api_key=KEY)
    vectors = [item["embedding"] for item in response.data]
    assert vectors == [fake_embedding("مادرید"), fake_embedding("Madrid is the capital")]
    assert server.embedding_requests == 1 and len(vectors[0]) == server.embedding_dim
