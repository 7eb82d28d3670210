"""Every token the provider read is counted: failed (5xx with a body, a malformed body, a timeout once
sent), retried and unparseable requests too, from the reply's ``usage`` or, without one, counted as the
provider would; so that the totals, and the dollars a budget sees, are what the provider saw."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import json
from pathlib import Path

from fake_llm_server import FakeLLMServer, Reply, malformed, rate_limited, server_error
from scripted_llm import tokenizer

from composer.llm import LLMClient, LLMConfig, TokenPrice
from composer.llm.faults import reached_provider
from composer.llm.pricing import count_tokens

MODEL = "openai/fake"
PRICE = TokenPrice(input=1.0, output=2.0)
QUESTION = [{"role": "user", "content": "ما عاصمة مصر؟ أجب بكائن JSON فيه المفتاح ok."}]


def client(server: FakeLLMServer, tmp_path: Path, **fields: object) -> LLMClient:
    config = LLMConfig(model=MODEL, api_base=server.url, max_retries=4, backoff_base=0.01, backoff_max=0.02,
                       cache=False, price=PRICE, **fields)
    return LLMClient(config, cache_dir=tmp_path)


def test_the_tokens_of_failed_retried_and_unparseable_requests_are_counted(tmp_path: Path) -> None:
    with FakeLLMServer(lambda req: '{"ok": 1}', count_tokens=tokenizer(MODEL)) as server:
        server.enqueue(
            rate_limited(0.01),  # read nothing, on either side
            server_error(500),  # an error with a body: the prompt was read
            malformed(),  # a body cut off: the prompt was read, no text to count
            Reply(content="لا أعرف"),  # unparseable: rejected, asked again with a repair instruction
            Reply(content='{"ok": 2}', usage=False),  # a reply without usage: counted here
        )
        llm = client(server, tmp_path)
        result = llm.complete(QUESTION, validate=json.loads)
        assert result.ok and result.text == '{"ok": 2}' and result.attempts == 5
        usage = llm.usage
        assert usage.requests == server.chat_requests == 5
        assert usage.prompt_tokens == server.prompt_tokens > 0
        assert usage.completion_tokens == server.completion_tokens > 0
        assert usage.estimated == 3  # the 500, the malformed body and the reply without usage
        assert usage.cost == PRICE.cost(server.prompt_tokens, server.completion_tokens) > 0


def test_a_timeout_after_sending_counts_the_prompt(tmp_path: Path) -> None:
    with FakeLLMServer(lambda req: '{"ok": 1}', count_tokens=tokenizer(MODEL)) as server:
        # The reply that comes too late has no text: the completion never reaches the client.
        server.enqueue(Reply(content="", delay=1.5))
        llm = client(server, tmp_path, timeout=0.5)
        result = llm.complete(QUESTION, validate=json.loads)
        assert result.ok and llm.usage.failed_attempts["timeout"] == 1
        assert llm.usage.prompt_tokens == server.prompt_tokens == 2 * count_tokens(MODEL, QUESTION)
        assert llm.usage.completion_tokens == server.completion_tokens


def test_a_request_never_read_costs_nothing() -> None:
    refused = ConnectionRefusedError("connection refused")
    assert not reached_provider(refused, "connection") and not reached_provider(refused, "rate_limit")
    assert reached_provider(TimeoutError("read timed out"), "timeout")
