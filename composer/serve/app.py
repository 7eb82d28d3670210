"""The HTTP service over an engine: ``POST /search``, ``POST /ask``, OpenAI's ``POST /v1/chat/completions``
(plain and streamed), ``GET /v1/models``, ``GET``/``HEAD /health``; OpenAPI docs at ``/docs``.

Pipeline calls run in worker threads (at most ``Limits.threads`` at once), so a slow answer never blocks
the event loop. A bad request is a 4xx whose body is ``{"detail": "<one line>"}``; no response or log line
carries a key (errors pass through ``composer.llm.faults.scrub``). Each response's ``Server-Timing:
pipeline;dur=<ms>`` header is the pipeline's own time, so a client can tell the server's overhead from it.
Who may call it (Host allow-list, bearer token) is ``composer.serve.guard``'s.
"""

from __future__ import annotations

import hashlib
import html
import importlib.util
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from composer.data.conversations import over_limit
from composer.data.types import Turn
from composer.serve.engine import Engine, Reply, Timed
from composer.serve.guard import Access, Guard
from composer.serve.schema import (
    AskRequest,
    AskResponse,
    ChatRequest,
    ErrorResponse,
    HistoryTurn,
    HitOut,
    SearchRequest,
    SearchResponse,
)
from composer.serve.tracing import Tracer
from composer.unicode import invalid_text


@dataclass(frozen=True)
class Limits:
    """What one request may ask for (each a ``composer serve`` option)."""

    max_body_bytes: int = 64 * 1024
    """--max-body-bytes: a request body past this is a 413, refused before it is read whole."""
    max_question_chars: int = 4000
    """--max-question-chars: a longer question is a 422 (it would be embedded and sent to the LLM whole)."""
    max_k: int = 100
    """--max-k: ``k`` above this is a 422 (each hit is scored, reranked and returned)."""
    threads: int = 32
    """--threads: pipeline calls in flight at once (ranking itself is serialized; see ``engine``)."""


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 413, 421, 422, 501, 502)
}


@dataclass
class Service:
    """What every route reads: the engine, the request bounds, the tracer and the worker threads."""

    engine: Engine
    bounds: Limits
    tracer: Tracer | None
    threads: anyio.CapacityLimiter

    async def call(self, kind: str, inputs: Mapping[str, Any], fn: Callable[[], Timed],
                   session: str | None = None) -> Timed:
        """``fn`` in a worker thread (traced when tracing is on, ``session`` the conversation): the event
        loop never waits on it."""

        def run() -> Timed:
            return fn() if self.tracer is None else self.tracer.traced(kind, inputs, fn, session)

        return await anyio.to_thread.run_sync(run, limiter=self.threads)

    def question(self, text: str) -> str:
        """``text`` as a question, or a 422 saying why not (empty, past ``--max-question-chars``, or not
        valid Unicode: a lone surrogate from a ``"\\udcff"`` escape could never be embedded nor sent)."""
        if not text.strip():
            raise HTTPException(422, "question: is empty")
        if (problem := invalid_text(text)) is not None:
            raise HTTPException(422, f"question: {problem}")
        if len(text) > self.bounds.max_question_chars:
            raise HTTPException(422, f"question: {len(text)} characters, more than the limit of "
                                     f"{self.bounds.max_question_chars} (--max-question-chars)")
        return text

    def history(self, where: str, turns: Sequence[tuple[str, str]]) -> tuple[Turn, ...]:
        """(role, text) pairs as a question's history, empty turns left out, or a 422 naming ``where``: a
        turn that is not valid Unicode, or a history past the caps question files have too
        (``composer.data.conversations.over_limit``)."""
        for i, (_, text) in enumerate(turns):
            if (problem := invalid_text(text)) is not None:
                raise HTTPException(422, f"{where}.{i}: {problem}")
        history = tuple(Turn("user" if role == "user" else "assistant", text)
                        for role, text in turns if text.strip())
        if (over := over_limit(history)) is not None:
            raise HTTPException(422, f"{where}: {over}")
        return history


def conversation_key(given: str | None, first_user_text: str) -> str:
    """The id a conversation's traces share: the one the client gave, else one derived from its first user
    message, the same on every turn of it."""
    if given:
        return given
    return "chat-" + hashlib.sha256(" ".join(first_user_text.split()).encode()).hexdigest()[:16]


def create_app(
    engine: Engine, limits: Limits | None = None, tracer: Tracer | None = None, access: Access | None = None
) -> FastAPI:
    """The service for ``engine``.

    Args:
        engine: What answers (see ``composer.serve.engine.load_engine``).
        limits: Request bounds (default ``Limits()``).
        tracer: Records each request as an MLflow trace (None: no tracing).
        access: Allowed ``Host`` names and the bearer token (default ``Access()``: anyone).

    Returns:
        The FastAPI application, serving ``ROUTES``.

    Example:
        ::

            app = create_app(PipelineEngine(composer.load_pipeline("best.yaml", "corpus.jsonl"), "best"))
            uvicorn.run(app, host="127.0.0.1", port=8000)
    """
    bounds = limits or Limits()
    app = FastAPI(title=f"Composer: {engine.name}", description="Search and answer with a Composer pipeline.",
                  docs_url=None, redoc_url=None)  # FastAPI's pages load their scripts from a CDN: see DOCS
    app.state.service = Service(engine, bounds, tracer, anyio.CapacityLimiter(bounds.threads))
    app.add_middleware(BodyLimit, limit=bounds.max_body_bytes)
    app.add_middleware(Guard, access=access or Access())  # the outermost: refused before the body is read
    app.add_exception_handler(RequestValidationError, _invalid)
    app.include_router(ROUTES)
    app.include_router(DOCS)
    return app


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


ROUTES = APIRouter()
Served = Annotated[Service, Depends(_service)]


async def _invalid(request: Request, exc: Exception) -> JSONResponse:
    """A request FastAPI could not read, as one line: bad JSON is a 400, a bad or unknown field a 422."""
    assert isinstance(exc, RequestValidationError)  # the one exception it handles
    first = exc.errors()[0]
    if first.get("type") == "json_invalid":
        return JSONResponse({"detail": f"bad JSON: {first.get('ctx', {}).get('error', 'unreadable')}"},
                            status_code=400)
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
    if first.get("type") == "extra_forbidden":
        return JSONResponse({"detail": f"unknown field {where!r}"}, status_code=422)
    return JSONResponse({"detail": f"{where}: {first.get('msg', 'invalid')}"}, status_code=422)


@ROUTES.get("/health")
@ROUTES.head("/health", include_in_schema=False)
async def health(service: Served) -> dict[str, Any]:
    """Whether the service answers, and what it serves (``HEAD`` too, as uptime checks ask)."""
    engine = service.engine
    return {"status": "ok", "model": engine.name, "answerer": engine.answerer, "search": engine.can_search}


@ROUTES.post("/search", response_model=SearchResponse, responses=ERRORS)
async def search(body: SearchRequest, response: Response, service: Served) -> SearchResponse:
    """The ranked chunks for a question, best first."""
    engine, max_k = service.engine, service.bounds.max_k
    if not engine.can_search:
        raise HTTPException(501, f"{engine.name} is a model without a Composer pipeline: it answers only")
    question = service.question(body.question)
    if body.k is not None and not 1 <= body.k <= max_k:
        raise HTTPException(422, f"k: {body.k} is out of range 1..{max_k} (--max-k)")
    k = body.k
    done = await service.call("search", {"question": question, "k": k}, lambda: engine.search(question, k))
    response.headers["Server-Timing"] = _timing(done)
    return SearchResponse(hits=[HitOut(**asdict(h)) for h in done.value], latency_ms=done.seconds * 1e3)


@ROUTES.post("/ask", response_model=AskResponse, responses=ERRORS)
async def ask(body: AskRequest, response: Response, service: Served) -> AskResponse:
    """The answer to a question, with the passages it was given and where they come from."""
    question = service.question(body.question)
    turns = [(t.role, _turn_text(i, t)) for i, t in enumerate(body.history or ())]
    history = service.history("history", turns)
    first = next((t.text for t in history if t.role == "user"), question)
    done = await service.call("ask", _inputs(question, history),
                              lambda: service.engine.ask(question, history),
                              conversation_key(body.conversation_id, first))
    response.headers["Server-Timing"] = _timing(done)
    r: Reply = done.value
    return AskResponse(answer=r.answer, contexts=list(r.contexts), hits=[HitOut(**asdict(h)) for h in r.hits],
                       citations=list(r.citations), language=r.language, refusal=r.refusal, error=r.error,
                       latency_ms=done.seconds * 1e3)


@ROUTES.get("/v1/models")
async def models(service: Served) -> dict[str, Any]:
    """The one model served, as OpenAI lists models."""
    return {"object": "list", "data": [{"id": service.engine.name, "object": "model", "created": 0,
                                        "owned_by": "composer"}]}


@ROUTES.post("/v1/chat/completions", responses=ERRORS)
async def chat(body: ChatRequest, service: Served) -> Response:
    """OpenAI's chat completion: the last user message is the question, the user and assistant messages
    before it its history; ``stream`` sends the answer's tokens as SSE chunks as the LLM writes them."""
    if (refusal := body.unsupported()) is not None:
        raise HTTPException(422, refusal)
    users = [i for i, m in enumerate(body.messages) if m.role == "user"]
    if not users:
        raise HTTPException(422, "messages: no user message to answer")
    last = users[-1]
    question = service.question(_text(last, body.messages[last].content))
    earlier = [(m.role, _text(i, m.content)) for i, m in enumerate(body.messages[:last])
               if m.role in ("user", "assistant")]
    history = service.history("messages", earlier)
    given = body.conversation_id or (body.metadata or {}).get("conversation_id")
    first = next((t.text for t in history if t.role == "user"), question)
    session = conversation_key(given if isinstance(given, str) else None, first)
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": service.engine.name}
    if body.stream:
        return await _streamed(service, head, question, history, session)
    done = await service.call("chat", _inputs(question, history),
                              lambda: service.engine.ask(question, history), session)
    r: Reply = done.value
    if r.answer is None:
        raise HTTPException(502, f"the pipeline's LLM failed: {r.error or 'no answer'}")
    prompt, completion = r.usage.get("prompt_tokens", 0), r.usage.get("completion_tokens", 0)
    return JSONResponse(headers={"Server-Timing": _timing(done)}, content={
        **head, "citations": list(r.citations), "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": r.answer},
                     "finish_reason": "stop", "logprobs": None}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion},
    })


async def _streamed(service: Service, head: dict[str, Any], question: str, history: tuple[Turn, ...],
                    session: str) -> Response:
    """The answer as SSE chunks, each piece as the generator's LLM sends it, then a chunk that stops with
    the citations, then ``data: [DONE]``. A failure before the first piece is a 502, as unstreamed; one
    after it (the status is sent) ends the stream with an error event."""
    tracer = service.tracer
    span = None if tracer is None else tracer.start("chat", _inputs(question, history), session)
    pieces: Iterator[str | Timed] = service.engine.stream(question, history)

    traced = False  # the span ended (finished or failed)

    async def step() -> str | Timed | None:
        nonlocal traced
        try:
            return await anyio.to_thread.run_sync(next, pieces, None, limiter=service.threads)
        except BaseException as exc:
            if tracer is not None and not traced:
                tracer.failed(span, exc)
                traced = True
            raise

    first = await step()
    if isinstance(first, Timed) and first.value.answer is None:
        if tracer is not None:
            tracer.finish(span, first)
        raise HTTPException(502, f"the pipeline's LLM failed: {first.value.error or 'no answer'}")

    def chunk(delta: dict[str, str], finish: str | None = None, **extra: Any) -> bytes:
        body = {**head, **extra, "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n".encode()

    async def events() -> AsyncIterator[bytes]:
        nonlocal traced
        try:
            yield chunk({"role": "assistant", "content": ""})
            item = first
            while isinstance(item, str):
                yield chunk({"content": item})
                item = await step()
            assert isinstance(item, Timed), "an engine's stream ends with its reply"
            if tracer is not None:
                tracer.finish(span, item)
                traced = True
            r: Reply = item.value
            if r.answer is None:
                error = {"message": f"the pipeline's LLM failed: {r.error or 'no answer'}",
                         "type": "server_error"}
                yield f"data: {json.dumps({'error': error}, ensure_ascii=False)}\n\n".encode()
            else:
                yield chunk({}, "stop", citations=list(r.citations))
            yield b"data: [DONE]\n\n"
        finally:  # a client that leaves mid-stream: stop the LLM's stream and end the request's trace
            close = getattr(pieces, "close", None)
            if close is not None:
                with suppress(ValueError):  # a piece still being read in a worker thread: it ends there
                    close()
            if tracer is not None and not traced:
                tracer.failed(span, ConnectionAbortedError("the client left before the answer ended"))

    return StreamingResponse(events(), media_type="text/event-stream")


def _inputs(question: str, history: Sequence[Turn]) -> dict[str, Any]:
    """A request's trace inputs: the question, and its history when it has one."""
    if not history:
        return {"question": question}
    return {"question": question, "history": [t.to_dict() for t in history]}


DOCS = APIRouter(include_in_schema=False)
"""``/docs`` served whole by this server, since FastAPI's pages load their scripts from a CDN (blank
offline): Swagger UI from the files an installed dependency ships, else a page written from the schema."""
SWAGGER_FILES = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css",
                 "favicon.png": "image/png"}


def swagger_folder() -> Path | None:
    """The folder of an installed Swagger UI 5 (litellm's proxy, a dependency, ships swagger-ui-dist's
    bundle, css and icon), found without importing its package; None where none is installed."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "proxy" / "swagger"
    return folder if all((folder / name).is_file() for name in SWAGGER_FILES) else None


@DOCS.get("/docs")
async def docs(request: Request) -> HTMLResponse:
    """Swagger UI, its files from this server (``/docs/<file>``); without them, the schema as a page."""
    if swagger_folder() is None:
        return HTMLResponse(schema_page(request.app.openapi()))
    return get_swagger_ui_html(
        openapi_url=request.app.openapi_url, title=f"{request.app.title} - docs",
        swagger_js_url="/docs/swagger-ui-bundle.js", swagger_css_url="/docs/swagger-ui.css",
        swagger_favicon_url="/docs/favicon.png",
        swagger_ui_parameters={"validatorUrl": None},  # its default badge calls validator.swagger.io
    )


@DOCS.get("/docs/{name}")
async def docs_file(name: str) -> FileResponse:
    """One of Swagger UI's files (``SWAGGER_FILES``), from the folder ``swagger_folder`` found."""
    folder = swagger_folder()
    if folder is None or name not in SWAGGER_FILES:
        raise HTTPException(404, f"/docs/{name}: no such file")
    return FileResponse(folder / name, media_type=SWAGGER_FILES[name])


def schema_page(schema: Mapping[str, Any]) -> str:
    """The OpenAPI schema as one self-contained HTML page: each route, what it does, its request body and
    its responses, and the schema itself (``/openapi.json`` for tools)."""
    info = schema.get("info", {})
    rows = []
    for path, methods in schema.get("paths", {}).items():
        for method, op in methods.items():
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
            takes = str(body.get("$ref", "")).rsplit("/", 1)[-1] or "-"
            rows.append(f"<tr><td><code>{method.upper()} {html.escape(path)}</code></td>"
                        f"<td>{html.escape(op.get('description') or op.get('summary', ''))}</td>"
                        f"<td>{html.escape(takes)}</td><td>{', '.join(op.get('responses', {}))}</td></tr>")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(info.get('title', ''))}"
            f"</title></head><body><h1>{html.escape(info.get('title', ''))}</h1>"
            f"<p>{html.escape(info.get('description', ''))} The schema: <a href='/openapi.json'>"
            "/openapi.json</a>.</p><table border='1' cellpadding='4'><tr><th>route</th><th>what</th>"
            f"<th>body</th><th>responses</th></tr>{''.join(rows)}</table>"
            f"<pre>{html.escape(json.dumps(schema.get('components', {}), indent=1))}</pre></body></html>")


def _timing(done: Timed) -> str:
    return f"pipeline;dur={done.seconds * 1e3:.3f}"


def _turn_text(at: int, turn: HistoryTurn) -> str:
    """A history turn's text, given as ``text`` or ``content`` (one of them, not both)."""
    if (turn.text is None) == (turn.content is None):
        raise HTTPException(422, f"history.{at}: give the turn's text as 'text' or 'content' (one of them)")
    return turn.text if turn.text is not None else str(turn.content)


def _text(at: int, content: str | list[dict[str, Any]] | None) -> str:
    """Message ``at``'s text: the string, or its text parts joined (OpenAI's content-part form); a text
    part whose text is not a string is a 422, never its ``str()``."""
    if isinstance(content, str) or content is None:
        return content or ""
    texts: list[str] = []
    for i, part in enumerate(content):
        if part.get("type") == "text":
            text = part.get("text", "")
            if not isinstance(text, str):
                raise HTTPException(422, f"messages.{at}.content.{i}.text: Input should be a valid string")
            texts.append(text)
    return "\n".join(texts)


class BodyLimit:
    """Refuse a request body past ``limit`` bytes with a 413: by its Content-Length before reading, and
    while reading one sent without it (chunked), so no client makes the server hold more."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await JSONResponse({"detail": self._too_large()}, status_code=413)(scope, receive, send)
            return
        seen = 0

        async def bounded() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise HTTPException(413, self._too_large())
            return message

        await self.app(scope, bounded, send)

    def _too_large(self) -> str:
        return f"request body: more than {self.limit} bytes (--max-body-bytes)"

