"""Reading at most a bounded number of bytes of each reply, so a server that ignores max_tokens (a 10 MB
reply) costs no more memory than a reply of the allowed length.

OpenAI-compatible endpoints get an SDK client whose HTTP transport enforces the bound while the body
arrives: a Content-Length over it is refused before any byte is read, a chunked body is cut off at it.
The bound of the request in flight travels in a context variable (one client serves every request).
"""

from __future__ import annotations

import asyncio
import atexit
import ssl
import threading
import weakref
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import httpx

from composer.llm.faults import ReplyTooLarge
from composer.llm.sdk import load_litellm

CHARS_PER_TOKEN = 32
"""Characters one token can stand for, generously (long words, runs of spaces): text beyond
max_tokens x this is no reply within max_tokens."""
BYTES_PER_CHAR = 6
"""A character in a JSON body, at worst (a \\uXXXX escape)."""
ENVELOPE_BYTES = 64 * 1024
"""The JSON around the text (ids, usage, logprobs of a few tokens)."""
UNBOUNDED_TOKENS = 32_768
"""max_tokens assumed when none is set: the longest replies providers give today."""

_LIMIT: ContextVar[int | None] = ContextVar("composer_llm_reply_limit", default=None)
_Endpoint = tuple[str | None, str | None]  # (api key, api base)
_SDK_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[_Endpoint, Any]] = (
    weakref.WeakKeyDictionary()
)
_LOCK = threading.Lock()
_close_registered = False


def text_limit(max_tokens: object) -> int:
    """The most characters a reply of ``max_tokens`` tokens can have."""
    tokens = max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else UNBOUNDED_TOKENS
    return tokens * CHARS_PER_TOKEN


def body_limit(max_tokens: object) -> int:
    """The most bytes of a reply body read for a request with ``max_tokens``."""
    return ENVELOPE_BYTES + text_limit(max_tokens) * BYTES_PER_CHAR


@contextmanager
def reply_limit(limit: int) -> Iterator[None]:
    """Bound the bodies read by the requests made in this context (this task) to ``limit`` bytes."""
    token = _LIMIT.set(limit)
    try:
        yield
    finally:
        _LIMIT.reset(token)


def sdk_client(api_key: str | None, api_base: str | None) -> Any:
    """The running loop's bounded SDK client for this endpoint, shared by every LLMClient (one per loop:
    connections belong to the loop that opened them); all are closed at exit, as litellm closes its own."""
    loop = asyncio.get_running_loop()
    with _LOCK:
        clients = _SDK_CLIENTS.setdefault(loop, {})
        client = clients.get((api_key, api_base))
        if client is None:
            client = clients[(api_key, api_base)] = capped_openai_client(api_key, api_base)
            global _close_registered
            if not _close_registered:
                atexit.register(_close_all)
                _close_registered = True
    return client


def _close_all() -> None:
    """Close every SDK client on its loop: an unclosed aiohttp session prints errors at shutdown."""
    for loop, clients in list(_SDK_CLIENTS.items()):
        if loop.is_closed() or not clients:
            continue
        closing = _close(list(clients.values()))
        try:
            if loop.is_running():  # the background loop of ``run_sync``, in its thread
                asyncio.run_coroutine_threadsafe(closing, loop).result(timeout=5.0)
            else:
                loop.run_until_complete(closing)
        except Exception:  # exiting anyway: nothing to report to
            closing.close()


async def _close(clients: list[Any]) -> None:
    await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


def capped_openai_client(api_key: str | None, api_base: str | None) -> Any:
    """An AsyncOpenAI client (no retries: ours are counted) whose transport enforces the reply limit."""
    from openai import AsyncOpenAI

    # httpx, as litellm gives the SDK: the SDK takes it whichever httpx it is built on.
    http: Any = httpx.AsyncClient(transport=_CappedTransport(_litellm_transport()), follow_redirects=True)
    return AsyncOpenAI(api_key=api_key, base_url=api_base, http_client=http, max_retries=0)


def _litellm_transport() -> httpx.AsyncBaseTransport:
    """The transport litellm itself would use (aiohttp when installed, its SSL settings), so a request
    goes out, and fails, exactly as without the bound; plain httpx where this litellm has none."""
    load_litellm()  # imported as the client imports it (no price-map download)
    try:
        from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler, get_ssl_configuration

        ssl_config = get_ssl_configuration()
        transport = AsyncHTTPHandler.create_async_transport(
            ssl_context=ssl_config if isinstance(ssl_config, ssl.SSLContext) else None,
            ssl_verify=ssl_config if isinstance(ssl_config, bool) else None,
        )
    except (ImportError, AttributeError, TypeError):
        transport = None
    return transport if isinstance(transport, httpx.AsyncBaseTransport) else httpx.AsyncHTTPTransport()


class _CappedTransport(httpx.AsyncBaseTransport):
    """Delegates to ``inner``; a body over the limit raises ReplyTooLarge instead of being read."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        limit = _LIMIT.get()
        if limit is None:
            return response
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            await response.aclose()
            raise ReplyTooLarge(f"the reply has {int(length)} bytes, more than the {limit} max_tokens allow")
        response.stream = _CappedStream(response.stream, limit)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CappedStream(httpx.AsyncByteStream):
    """An async byte stream that stops with ReplyTooLarge once more than ``limit`` bytes came."""

    def __init__(self, stream: Any, limit: int) -> None:
        self._stream = stream
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = 0
        async for chunk in self._stream:
            read += len(chunk)
            if read > self._limit:
                raise ReplyTooLarge(f"the reply passed the {self._limit} bytes max_tokens allow")
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()
