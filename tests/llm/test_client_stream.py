"""``LLMClient.astream``: the reply's text in pieces as the provider sends them, counted, retried before
the first piece, cached once whole (and shared with ``acomplete``), a failure a Result, never an exception."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest
from fake_llm_server import FakeLLMServer, Reply, server_error

from composer.llm import LLMClient, LLMConfig, track_usage
from composer.llm.client import Result
from composer.llm.sync import iterate_sync

REPLY = "the river Nile is the longest river in Africa"


@pytest.fixture()
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(lambda req: Reply(REPLY, prompt_tokens=7, completion_tokens=9)) as srv:
        yield srv


def client_for(server: FakeLLMServer, cache_dir: Path, **overrides: object) -> LLMClient:
    settings = {"model": "openai/fake-model", "api_base": server.url, "timeout": 5.0, "backoff_base": 0.01,
                "backoff_max": 0.02, **overrides}
    return LLMClient(LLMConfig.model_validate(settings), cache_dir=cache_dir)


def streamed(client: LLMClient, question: str) -> tuple[list[str], Result | None]:
    stream = client.astream([{"role": "user", "content": question}])
    return list(iterate_sync(stream.__aiter__())), stream.result


def test_a_reply_streams_in_pieces_and_is_counted_and_cached_once_whole(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    client = client_for(server, tmp_path)
    with track_usage() as tracked:
        pieces, result = streamed(client, "which river?")
    assert len(pieces) > 1 and "".join(pieces) == REPLY
    assert result is not None and result.ok and result.text == REPLY and not result.cached
    assert (result.prompt_tokens, result.completion_tokens) == (7, 9)  # the usage chunk asked for
    assert server.received[-1].body["stream"] is True
    assert (tracked.calls, tracked.requests, tracked.completion_tokens) == (1, 1, 9)
    again, cached = streamed(client, "which river?")
    assert again == [REPLY] and cached is not None and cached.cached and server.chat_requests == 1
    assert client.complete([{"role": "user", "content": "which river?"}]).cached  # one cache for both


def test_a_failure_before_the_first_piece_is_retried_then_a_result(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    client = client_for(server, tmp_path, max_retries=1, cache=False)
    server.enqueue(server_error(500))
    pieces, result = streamed(client, "first")
    assert "".join(pieces) == REPLY and result is not None and result.attempts == 2
    server.enqueue(server_error(500), server_error(500))
    pieces, result = streamed(client, "second")
    assert pieces == [] and result is not None and result.error_kind == "server_error" and result.text is None
    assert client.usage.failed_calls["server_error"] == 1
