"""A local OpenAI-compatible server for tests and benchmarks: scripted replies and injected faults.

Serves POST /v1/chat/completions and /v1/embeddings on 127.0.0.1 (port 0 = any free port), so the code
under test goes through litellm exactly as with a real provider (model "openai/<name>", api_base = `url`)
without ever touching a public endpoint. Replies come from a route callable over the request; faults
(429 with Retry-After, 500, a sleep past the client's timeout, a malformed body, a huge reply) are queued with
`enqueue` and served before the route. The server counts requests and the most it saw in flight. A
study's test request before its first trial (``composer.llm.preflight.PING``) goes to the route, never
to a queued fault, and is counted in `pings`, not in `chat_requests`: queued faults and counts are for
the calls under test. Given a tokenizer (``count_tokens``), the server counts, as a real one does, the
tokens of every request it read (``prompt_tokens``, ``completion_tokens``): 200s, error statuses with a
body, malformed bodies and timeouts alike (a 429 reads nothing), and reports them as each reply's
``usage``, unless the reply says it has none (``Reply.usage``). A request with ``stream: true`` gets its
reply as OpenAI's server-sent chunks, a word at a time (``STREAM_GAP`` apart).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from composer.llm.preflight import PING


class LoopbackServer(ThreadingHTTPServer):
    """A threading HTTP server that stays quiet when a client drops a kept-alive connection (litellm's
    pools close theirs at exit or after a timeout); any other handler error is still printed."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


@dataclass(frozen=True)
class ChatRequest:
    """What the route sees: the model, the messages and the last user message's text."""

    model: str
    messages: list[dict[str, Any]]
    body: dict[str, Any]
    headers: dict[str, str]
    arrived: float = 0.0  # time.monotonic() when the request came in

    @property
    def prompt(self) -> str:
        """The last user message, where the prompts put the material to judge."""
        for m in reversed(self.messages):
            if m.get("role") == "user":
                return str(m.get("content", ""))
        return ""

    @property
    def system(self) -> str:
        return next((str(m.get("content", "")) for m in self.messages if m.get("role") == "system"), "")


@dataclass(frozen=True)
class Reply:
    """One scripted response: content for a 200, or an error status, a delay, a raw (malformed) body."""

    content: str = "ok"
    status: int = 200
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    raw_body: bytes | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    chunked: bool = False  # send the body with Transfer-Encoding: chunked (no Content-Length)
    usage: bool = True  # False: a 200 without "usage", as some local servers send


Route = Callable[[ChatRequest], "Reply | str"]
TokenCount = Callable[[list[dict[str, Any]], "str | None"], tuple[int, int]]
"""The server's tokenizer: (messages, reply text or None) -> (prompt tokens, completion tokens)."""


def rate_limited(retry_after: float | None = 0.05) -> Reply:
    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
    body = {"error": {"message": "Rate limit reached", "type": "rate_limit_error", "code": "rate_limit"}}
    return Reply(status=429, headers=headers, raw_body=json.dumps(body).encode())


def server_error(status: int = 500) -> Reply:
    body = {"error": {"message": "The server had an error", "type": "server_error"}}
    return Reply(status=status, raw_body=json.dumps(body).encode())


def hang(seconds: float) -> Reply:
    """A reply that arrives after `seconds`: past the client's timeout, it is a timeout."""
    return Reply(content="too late", delay=seconds)


def malformed() -> Reply:
    return Reply(raw_body=b'{"id": "chatcmpl-x", "choices": [{"message": {"content": "trunc')


def huge(size: int, *, chunked: bool = False) -> Reply:
    """A well-formed 200 whose message is ``size`` characters: a server that ignores max_tokens. The body
    is built here, once: serve the same Reply many times and the server's memory does not grow."""
    payload = {
        "id": "chatcmpl-huge",
        "object": "chat.completion",
        "created": 0,
        "model": "huge",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "x" * size}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": size // 4, "total_tokens": 1 + size // 4},
    }
    return Reply(raw_body=json.dumps(payload).encode(), chunked=chunked)


STREAM_GAP = 0.01
"""Seconds between the chunks of a streamed reply: pieces arrive one by one, as from a real provider."""


def _approx_tokens(text: str) -> int:
    return max(1, len(text.split()))


def fake_embedding(text: str, dim: int = 32) -> list[float]:
    """A deterministic unit vector from hashed word counts: texts sharing words point the same way."""
    vec = [0.0] * dim
    for word in re.findall(r"\w+", text.lower()):
        h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
        vec[h % dim] += 1.0 if (h >> 32) & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


class FakeLLMServer:
    """Start with `with FakeLLMServer(route) as server:`; point litellm at `server.url`."""

    def __init__(
        self,
        route: Route | None = None,
        *,
        latency: float = 0.0,
        embedding_dim: int = 32,
        count_tokens: TokenCount | None = None,
    ) -> None:
        self.route: Route = route or (lambda req: "ok")
        self.count_tokens = count_tokens
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.latency = latency
        self.embedding_dim = embedding_dim
        self.requests = 0
        self.chat_requests = 0
        self.pings = 0
        self.embedding_requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.received: list[ChatRequest] = []
        self.statuses: list[int] = []
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def enqueue(self, *replies: Reply) -> None:
        """Serve these replies, in order, to the next chat requests before the route answers again."""
        with self._lock:
            self._queue.extend(replies)

    def reset_counts(self) -> None:
        with self._lock:
            self.requests = self.chat_requests = self.pings = self.embedding_requests = 0
            self.max_in_flight = self.prompt_tokens = self.completion_tokens = 0
            self.received.clear()
            self.statuses.clear()

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "requests": self.requests,
                "chat_requests": self.chat_requests,
                "pings": self.pings,
                "embedding_requests": self.embedding_requests,
                "max_in_flight": self.max_in_flight,
            }

    def start(self) -> FakeLLMServer:
        handler = _make_handler(self)
        httpd = LoopbackServer(("127.0.0.1", 0), handler, bind_and_activate=False)
        httpd.daemon_threads = True
        httpd.request_queue_size = 256  # many concurrent connects: the default backlog of 5 refuses them
        httpd.allow_reuse_address = True
        httpd.server_bind()
        httpd.server_activate()
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- request handling (called from handler threads) --

    def _next_reply(self, req: ChatRequest) -> Reply:
        with self._lock:
            queued = self._queue.popleft() if self._queue and req.messages != PING else None
        if queued is not None:
            return queued
        reply = self.route(req)
        return Reply(content=reply) if isinstance(reply, str) else reply

    def _enter(self, kind: str) -> None:
        with self._lock:
            self.requests += 1
            if kind == "chat":
                self.chat_requests += 1
            elif kind == "ping":
                self.pings += 1
            else:
                self.embedding_requests += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _record(self, status: int) -> None:
        """Before the reply is written: a client that has its answer must find its status recorded."""
        with self._lock:
            self.statuses.append(status)

    def _read(self, req: ChatRequest, reply: Reply) -> tuple[int, int] | None:
        """With a tokenizer, the request's tokens as this server counts them, added to its totals (the test
        request and a 429 are not counted: the first is none of the calls under test, the second read
        nothing); None without one."""
        if self.count_tokens is None:
            return None
        text = reply.content if reply.raw_body is None else None
        pt, ct = self.count_tokens(req.messages, text)
        pt = pt if reply.prompt_tokens is None else reply.prompt_tokens
        ct = ct if reply.completion_tokens is None else reply.completion_tokens
        if req.messages != PING and reply.status != 429:
            with self._lock:
                self.prompt_tokens += pt
                self.completion_tokens += ct
        return pt, ct

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1


def _make_handler(server: FakeLLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real providers do
        # Headers and body go out in two writes: with Nagle's algorithm the body would wait for the
        # client's delayed ACK (up to 40 ms on Linux), a latency no real provider adds.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            """Silent: tests read the counters instead."""

        def do_GET(self) -> None:
            """GET /stats: the counters, for a server running in another process (the benchmark)."""
            if self.path.rstrip("/").endswith("/stats"):
                self._send(200, server.stats())
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError:
                self._send(400, {"error": {"message": "invalid JSON body"}})
                return
            path = self.path.rstrip("/")
            if path.endswith("/chat/completions"):
                self._chat(body)
            elif path.endswith("/embeddings"):
                self._embeddings(body)
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def _chat(self, body: dict[str, Any]) -> None:
            server._enter("ping" if body.get("messages") == PING else "chat")
            status = 200
            recorded = False
            try:
                req = ChatRequest(
                    model=str(body.get("model", "")),
                    messages=list(body.get("messages", [])),
                    body=body,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    arrived=time.monotonic(),
                )
                with server._lock:
                    server.received.append(req)
                reply = server._next_reply(req)
                counted = server._read(req, reply)
                status = reply.status
                time.sleep(server.latency + reply.delay)
                server._record(status)
                recorded = True
                if reply.raw_body is not None:
                    self._send_raw(reply.status, reply.raw_body, reply.headers, chunked=reply.chunked)
                    return
                prompt_text = " ".join(str(m.get("content", "")) for m in req.messages)
                pt = reply.prompt_tokens if reply.prompt_tokens is not None else _approx_tokens(prompt_text)
                ct = (
                    reply.completion_tokens
                    if reply.completion_tokens is not None
                    else _approx_tokens(reply.content)
                )
                if counted is not None:
                    pt, ct = counted
                payload = {
                    "id": f"chatcmpl-{server.requests}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": req.model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": reply.content},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct},
                }
                if not reply.usage:
                    del payload["usage"]
                if body.get("stream") and reply.status == 200:
                    self._stream(payload, bool((body.get("stream_options") or {}).get("include_usage")))
                    return
                self._send(reply.status, payload, reply.headers)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test): nothing to answer
            finally:
                if not recorded:
                    server._record(status)
                server._leave()

        def _embeddings(self, body: dict[str, Any]) -> None:
            server._enter("embedding")
            try:
                time.sleep(server.latency)
                texts = body.get("input", [])
                if isinstance(texts, str):
                    texts = [texts]
                data = [
                    {
                        "object": "embedding",
                        "index": i,
                        "embedding": fake_embedding(str(t), server.embedding_dim),
                    }
                    for i, t in enumerate(texts)
                ]
                tokens = sum(_approx_tokens(str(t)) for t in texts)
                payload = {
                    "object": "list",
                    "data": data,
                    "model": body.get("model", ""),
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                }
                server._record(200)
                self._send(200, payload)
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                server._leave()

        def _stream(self, payload: dict[str, Any], include_usage: bool) -> None:
            """A reply to ``stream: true``: OpenAI's SSE chunks, one per word (spaces kept), ``STREAM_GAP``
            seconds apart, the usage in a last chunk when asked, then ``data: [DONE]``."""
            content = payload["choices"][0]["message"]["content"]
            base = {k: payload[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
            deltas = [{"role": "assistant", "content": ""}] + [
                {"content": w} for w in re.findall(r"\S+\s*|\s+", content)]
            events = [{**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
            events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            if include_usage and "usage" in payload:
                events.append({**base, "choices": [], "usage": payload["usage"]})
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            lines = [f"data: {json.dumps(e, ensure_ascii=False)}\n\n" for e in events]
            for event in [*lines, "data: [DONE]\n\n"]:
                data = event.encode("utf-8")
                self.wfile.write(b"%x\r\n" % len(data) + data + b"\r\n")
                self.wfile.flush()
                time.sleep(STREAM_GAP)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            self._send_raw(status, json.dumps(payload, ensure_ascii=False).encode("utf-8"), headers)

        def _send_raw(
            self, status: int, data: bytes, headers: dict[str, str] | None = None, *, chunked: bool = False
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if not chunked:
                self.wfile.write(data)
            else:
                view = memoryview(data)
                for start in range(0, len(data), 65536):
                    piece = view[start : start + 65536]
                    self.wfile.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler
