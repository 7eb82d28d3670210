"""The HTTP service over an engine: ``POST /search``, ``POST /ask``, OpenAI's ``POST /v1/chat/completions``
(plain and streamed), ``GET /v1/models``, ``GET``/``HEAD /health``; OpenAPI docs at ``/docs``.

Pipeline calls run in worker threads (at most ``Limits.threads`` at once), so a slow answer never blocks
the event loop. A bad request is a 4xx whose body is ``{"detail": "<one line>"}``; no response or log line
carries a key (errors pass through ``composer.llm.faults.scrub``). Each response's ``Server-Timing:
pipeline;dur=<ms>`` header is the pipeline's own time, so a client can tell the server's overhead from it.
Who may call it (Host allow-list, bearer token) is ``composer.serve.guard``'s.
"""

from __future__ import annotations

import html
import importlib.util
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from composer.serve.engine import Engine, Reply, Timed
from composer.serve.guard import Access, Guard
from composer.serve.schema import (
    AskRequest,
    AskResponse,
    ChatRequest,
    ErrorResponse,
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

    async def call(self, kind: str, inputs: Mapping[str, Any], fn: Callable[[], Timed]) -> Timed:
        """``fn`` in a worker thread (traced when tracing is on): the event loop never waits on it."""

        def run() -> Timed:
            return fn() if self.tracer is None else self.tracer.traced(kind, inputs, fn)

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
    done = await service.call("ask", {"question": question}, lambda: service.engine.ask(question))
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
    """OpenAI's chat completion: the last user message is the question; ``stream`` sends SSE chunks."""
    if (refusal := body.unsupported()) is not None:
        raise HTTPException(422, refusal)
    users = [i for i, m in enumerate(body.messages) if m.role == "user"]
    if not users:
        raise HTTPException(422, "messages: no user message to answer")
    question = service.question(_text(users[-1], body.messages[users[-1]].content))
    done = await service.call("chat", {"question": question}, lambda: service.engine.ask(question))
    r: Reply = done.value
    if r.answer is None:
        raise HTTPException(502, f"the pipeline's LLM failed: {r.error or 'no answer'}")
    headers = {"Server-Timing": _timing(done)}
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": service.engine.name,
            "citations": list(r.citations)}
    if not body.stream:
        prompt, completion = r.usage.get("prompt_tokens", 0), r.usage.get("completion_tokens", 0)
        return JSONResponse(headers=headers, content={
            **head, "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": r.answer},
                         "finish_reason": "stop", "logprobs": None}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion},
        })
    deltas: tuple[dict[str, str], ...] = ({"role": "assistant", "content": ""}, {"content": r.answer}, {})
    chunks = [{**head, "object": "chat.completion.chunk",
               "choices": [{"index": 0, "delta": d, "finish_reason": None if d else "stop",
                            "logprobs": None}]} for d in deltas]
    return StreamingResponse(_sse(chunks), media_type="text/event-stream", headers=headers)


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


async def _sse(chunks: list[dict[str, Any]]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode()
    yield b"data: [DONE]\n\n"


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

