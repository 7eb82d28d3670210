"""`composer serve`: /search, /ask, OpenAI's /v1/chat/completions (plain and streamed), /health and /docs
over the bundled sample, an LLM pipeline on the local scripted server, MLflow pyfunc models, tracing; every
bad request a one-line 4xx; a key never in a response or a log line."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fake_llm_server import FakeLLMServer, server_error
from fastapi import FastAPI
from fastapi.testclient import TestClient

import composer
from composer.data import load_corpus, load_questions
from composer.llm import LLMConfig
from composer.pipeline.pipeline import Pipeline
from composer.serve import Limits, PipelineEngine, PredictEngine, create_app, load_engine

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "arcd-sample"
CORPUS = SAMPLE / "corpus.jsonl"
BM25 = {"retrieval": {"mode": "bm25", "k": 5}}
KEY_ENV = "COMPOSER_SERVE_TEST_KEY"
KEY = "sk-serve-test-0123456789abcdef0123456789"
QUESTION = "من هو جمال أحمد حمزة خاشقجي؟"


@pytest.fixture(scope="module")
def pipe(tmp_path_factory: pytest.TempPathFactory) -> Pipeline:
    return composer.load_pipeline(BM25, CORPUS, workdir=tmp_path_factory.mktemp("work"))


@pytest.fixture(scope="module")
def client(pipe: Pipeline) -> TestClient:
    return TestClient(create_app(PipelineEngine(pipe, "sample"), Limits(max_body_bytes=8192, max_k=20)))


@pytest.fixture(scope="module")
def golds() -> dict[str, str]:
    questions = load_questions(SAMPLE / "questions.jsonl", corpus=load_corpus(CORPUS)).questions[:6]
    return {q.question: q.gold_answers[0] for q in questions}


@pytest.fixture(scope="module")
def fake_llm_golds(golds: dict[str, str]) -> dict[str, str]:
    """The scripted model knows the answers of the questions the tests ask."""
    return golds


@pytest.fixture()
def fake_llm_latency() -> float:
    """Slow replies: the answers are still in flight together."""
    return 0.05


def llm_config(server: FakeLLMServer) -> dict[str, Any]:
    return {**BM25, "generation": {"model": "openai/fake", "api_base": server.url, "api_key_env": KEY_ENV,
                                   "max_contexts": 3}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(app: FastAPI) -> Iterator[str]:
    """``app`` on a real uvicorn server in a thread, on a free 127.0.0.1 port; its base URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(10)


def test_search_returns_hits_with_citations_and_the_pipelines_time(
    client: TestClient, pipe: Pipeline
) -> None:
    r = client.post("/search", json={"question": QUESTION, "k": 3})
    assert r.status_code == 200
    body = r.json()
    expected = pipe.search(QUESTION, k=3)
    assert [h["id"] for h in body["hits"]] == [h.id for h in expected]
    assert [h["score"] for h in body["hits"]] == pytest.approx([h.score for h in expected])
    first = body["hits"][0]
    assert first["doc_id"] == "arcd-000-0" and first["citation"] == "arcd-000-0" and "خاشقجي" in first["text"]
    assert body["latency_ms"] > 0
    assert r.headers["server-timing"] == f"pipeline;dur={body['latency_ms']:.3f}"
    default = client.post("/search", json={"question": QUESTION}).json()
    assert len(default["hits"]) == 5  # the config's k


def test_ask_answers_like_the_pipeline(client: TestClient, pipe: Pipeline) -> None:
    body = client.post("/ask", json={"question": QUESTION}).json()
    expected = pipe.ask(QUESTION)
    assert body["answer"] == expected.text and "صحفي" in body["answer"]
    assert body["contexts"] == list(expected.contexts)
    assert body["citations"] == list(expected.citations)
    assert [h["id"] for h in body["hits"]] == [h.id for h in expected.hits]
    assert body["language"] == "ar" and body["refusal"] is False and body["error"] is None


def test_concurrent_searches_get_what_one_at_a_time_gets(pipe: Pipeline, golds: dict[str, str]) -> None:
    asks = [(q, k) for q in golds for k in (1, 3, 5, 8)]
    expected = [[h.id for h in pipe.search(q, k)] for q, k in asks]
    with serving(create_app(PipelineEngine(pipe, "sample"))) as base, httpx.Client(base_url=base) as http:

        def search(ask: tuple[str, int]) -> list[str]:
            hits = http.post("/search", json={"question": ask[0], "k": ask[1]}, timeout=30).json()["hits"]
            return [h["id"] for h in hits]

        with ThreadPoolExecutor(8) as pool:
            assert list(pool.map(search, asks)) == expected


def test_health_docs_and_models(client: TestClient) -> None:
    assert client.get("/health").json() == {"status": "ok", "model": "sample", "answerer": "extractive",
                                            "search": True}
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/search", "/ask", "/v1/chat/completions", "/health"} <= set(paths)
    assert client.get("/v1/models").json()["data"][0]["id"] == "sample"


def _chunked(data: bytes) -> Iterator[bytes]:
    for i in range(0, len(data), 512):
        yield data[i:i + 512]


BAD = [
    ("/search", {"question": ""}, 422, "question: is empty"),
    ("/ask", {"question": "  \n "}, 422, "question: is empty"),
    ("/ask", {"question": "q" * 4001}, 422, "question: 4001 characters, more than the limit of 4000 "
                                            "(--max-question-chars)"),
    ("/search", {"question": "q", "k": 0}, 422, "k: 0 is out of range 1..20 (--max-k)"),
    ("/search", {"question": "q", "k": 21}, 422, "k: 21 is out of range 1..20 (--max-k)"),
    ("/search", {"question": "q", "k": "many"}, 422, "k: Input should be a valid integer"),
    ("/search", {"question": "q", "k": True}, 422, "k: Input should be a valid integer"),  # not k=1
    ("/search", {"question": "q", "k": 2.0}, 422, "k: Input should be a valid integer"),
    ("/search", {"question": "q", "kk": 3}, 422, "unknown field 'kk'"),
    ("/ask", {}, 422, "question: Field required"),
    ("/ask", {"question": ["a"]}, 422, "question: Input should be a valid string"),
    ("/ask", b'{"question": "q",}', 400, "bad JSON: Expecting property name enclosed in double quotes"),
    ("/ask", b"x" * 8193, 413, "request body: more than 8192 bytes (--max-body-bytes)"),
    ("/ask", _chunked, 413, "request body: more than 8192 bytes (--max-body-bytes)"),
    ("/v1/chat/completions", {"messages": [{"role": "system", "content": "hi"}]}, 422,
     "messages: no user message to answer"),
    ("/search", b'{"question": "\\udcff"}', 422,
     "question: invalid text (lone surrogate U+DCFF at character 1)"),
    ("/ask", b'{"question": "q\\ud800"}', 422,
     "question: invalid text (lone surrogate U+D800 at character 2)"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\\udcff"}]}', 422,
     "question: invalid text (lone surrogate U+DCFF at character 1)"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "q"}], "n": 2}, 422,
     "n: 2 choices asked; the pipeline gives one answer (n: 1)"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "q"}],
                              "tools": [{"type": "function", "function": {"name": "f"}}]}, 422,
     "tools: the pipeline calls no tools; send the question without them"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "q"}], "tool_choice": "required"}, 422,
     "tool_choice: the pipeline calls no tools ('none' or 'auto' only)"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "q"}], "logprobs": True}, 422,
     "logprobs: the pipeline's answer carries no token log-probabilities"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "q"}],
                              "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, 422,
     "response_format: 'json_schema' is not supported; the answer is plain text (type 'text')"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "q"}], "stream": "yes"}, 422,
     "stream: Input should be a valid boolean"),
    ("/v1/chat/completions",
     {"messages": [{"role": "user", "content": [{"type": "text", "text": {"nested": 1}}]}]},
     422, "messages.0.content.0.text: Input should be a valid string"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "q"}], "frequency_penalty": "0"}, 422,
     "frequency_penalty: Input should be a valid number"),
    ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "q"}]}, 422,
     "messages.0.role: Input should be 'system', 'user', 'assistant', 'tool' or 'developer'"),
]


@pytest.mark.parametrize(("path", "body", "status", "detail"), BAD)
def test_a_bad_request_is_a_4xx_with_a_one_line_reason(
    client: TestClient, path: str, body: Any, status: int, detail: str
) -> None:
    headers = {"content-type": "application/json"}
    if body is _chunked:  # no Content-Length: refused while it is read
        big = json.dumps({"question": "س" * 5000}, ensure_ascii=False).encode()
        r = client.post(path, content=_chunked(big), headers=headers)
    elif isinstance(body, bytes):
        r = client.post(path, content=body, headers=headers)
    else:
        r = client.post(path, json=body)
    assert (r.status_code, r.json()) == (status, {"detail": detail})


def test_openai_fields_that_leave_the_answer_as_it_is_are_accepted_and_ignored(
    client: TestClient, pipe: Pipeline
) -> None:
    body = {"messages": [{"role": "user", "content": QUESTION}], "n": 1, "temperature": 0, "top_p": 1,
            "presence_penalty": 0.5, "frequency_penalty": 1, "seed": 3, "user": "u-1", "max_tokens": 50,
            "max_completion_tokens": 50, "stop": ["\n\n"], "logprobs": False, "top_logprobs": 0,
            "response_format": {"type": "text"}, "tools": [], "tool_choice": "none"}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == pipe.ask(QUESTION).text


def test_head_health_answers_as_get_does(client: TestClient) -> None:
    r = client.head("/health")
    assert (r.status_code, r.content) == (200, b"")
    assert r.headers["content-type"] == "application/json"


def test_the_openai_client_reads_plain_and_streamed_completions(client: TestClient, pipe: Pipeline) -> None:
    openai = pytest.importorskip("openai")
    expected = pipe.ask(QUESTION)
    api = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client)
    messages: Any = [{"role": "system", "content": "ignored"}, {"role": "user", "content": "earlier"},
                     {"role": "assistant", "content": "..."}, {"role": "user", "content": QUESTION}]
    done = api.chat.completions.create(model="sample", messages=messages)
    assert done.object == "chat.completion" and done.model == "sample" and done.id.startswith("chatcmpl-")
    assert done.choices[0].message.content == expected.text and done.choices[0].finish_reason == "stop"
    assert done.usage is not None and done.usage.total_tokens == 0  # extractive: no tokens
    chunks = list(api.chat.completions.create(model="sample", messages=messages, stream=True))
    assert {c.object for c in chunks} == {"chat.completion.chunk"} and len({c.id for c in chunks}) == 1
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == expected.text
    assert [c.choices[0].finish_reason for c in chunks] == [None, None, "stop"]
    parts = api.chat.completions.create(
        model="sample", messages=[{"role": "user", "content": [{"type": "text", "text": QUESTION}]}])
    assert parts.choices[0].message.content == expected.text


def test_the_stream_is_server_sent_events_ending_done(client: TestClient) -> None:
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": QUESTION}],
                                                  "stream": True})
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [line for line in r.text.split("\n\n") if line]
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
    assert json.loads(events[0][6:])["choices"][0]["delta"] == {"role": "assistant", "content": ""}


def test_an_llm_pipeline_answers_concurrently_and_never_shows_its_key(
    fake_llm: FakeLLMServer, golds: dict[str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    fast = LLMConfig(model="openai/fake", timeout=5, backoff_base=0.01, backoff_max=0.02, max_retries=1)
    pipe = Pipeline.from_config(llm_config(fake_llm), workdir=tmp_path, llm=fast)
    pipe.index(load_corpus(CORPUS))
    questions = list(golds)
    caplog.set_level(logging.DEBUG)
    with serving(create_app(PipelineEngine(pipe, "llm"))) as base, httpx.Client(base_url=base) as http:
        fake_llm.reset_counts()

        def ask(question: str) -> httpx.Response:
            return http.post("/ask", json={"question": question}, timeout=30)

        with ThreadPoolExecutor(6) as pool:
            replies = list(pool.map(ask, questions))
        assert fake_llm.max_in_flight > 1  # answering is not serialized behind the ranking lock
        assert [r.json()["answer"] for r in replies] == [f"{golds[q]} بحسب السياق" for q in questions]
        assert replies[0].json()["citations"] and replies[0].json()["latency_ms"] >= 50
        chat = http.post("/v1/chat/completions",
                         json={"messages": [{"role": "user", "content": questions[0]}]})
        assert chat.json()["usage"]["prompt_tokens"] > 0
        fake_llm.enqueue(server_error(500), server_error(500))
        failed = ask("سؤال جديد لم يُسأل من قبل عن خاشقجي")
        assert failed.status_code == 200 and failed.json()["answer"] is None and failed.json()["error"]
        fake_llm.enqueue(server_error(500), server_error(500))
        bad_gateway = http.post("/v1/chat/completions",
                                json={"messages": [{"role": "user", "content": "سؤال آخر لم يُسأل عن جدة"}]})
        assert bad_gateway.status_code == 502 and "the pipeline's LLM failed" in bad_gateway.json()["detail"]
        texts = [r.text for r in (*replies, chat, failed, bad_gateway)]
    assert fake_llm.requests > 0
    assert all(KEY not in t for t in [*texts, caplog.text])


@pytest.mark.slow
def test_requests_are_traced_into_an_mlflow_experiment(pipe: Pipeline, tmp_path: Path) -> None:
    import mlflow

    from composer.serve.tracing import SERVED_TAG, Tracer

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    traced = TestClient(create_app(PipelineEngine(pipe, "sample"), tracer=Tracer("prod", uri, "sample")))
    assert traced.post("/ask", json={"question": QUESTION}).status_code == 200
    assert traced.post("/search", json={"question": QUESTION, "k": 2}).status_code == 200
    mlflow.flush_trace_async_logging()  # traces are written in the background: no request waits on the store
    experiment = mlflow.get_experiment_by_name("prod")
    assert experiment is not None
    traces = mlflow.search_traces(locations=[experiment.experiment_id], return_type="list")
    names = sorted(t.data.spans[0].name for t in traces)
    assert names == ["ask", "search"]
    ask = next(t for t in traces if t.data.spans[0].name == "ask")
    assert ask.info.tags[SERVED_TAG] == "sample"
    assert ask.data.spans[0].inputs == {"question": QUESTION}
    assert "صحفي" in ask.data.spans[0].outputs["answer"]


@pytest.mark.slow
def test_mlflow_pyfunc_models_serve_their_pipeline_or_their_predict(tmp_path: Path) -> None:
    import mlflow
    import mlflow.pyfunc

    class Piped(mlflow.pyfunc.PythonModel):  # type: ignore[misc]
        """Rebuilds its pipeline from its artifacts: a config and the corpus."""

        def load_context(self, context: Any) -> None:
            self.pipeline = composer.load_pipeline(context.artifacts["config"], context.artifacts["corpus"],
                                                   workdir=Path(context.artifacts["config"]).parent / "work")

        def predict(self, context: Any, model_input: list[str]) -> list[str]:
            return [self.pipeline.ask(q).text or "" for q in model_input]

    class Echo(mlflow.pyfunc.PythonModel):  # type: ignore[misc]
        def predict(self, context: Any, model_input: list[str]) -> list[dict[str, str | list[str]]]:
            return [{"answer": f"echo: {q}", "citations": ["a.pdf"]} for q in model_input]

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    config = tmp_path / "pipeline.yaml"
    config.write_text(json.dumps(BM25))
    with mlflow.start_run():
        mlflow.pyfunc.log_model(name="piped", python_model=Piped(), registered_model_name="sample-rag",
                                artifacts={"config": str(config), "corpus": str(CORPUS)})
        echo = mlflow.pyfunc.log_model(name="echo", python_model=Echo())
    mlflow.MlflowClient().set_registered_model_alias("sample-rag", "prod", "1")

    piped = load_engine("models:/sample-rag@prod")
    assert isinstance(piped, PipelineEngine) and piped.name == "sample-rag@prod"
    app = TestClient(create_app(piped))
    hits = app.post("/search", json={"question": QUESTION, "k": 1}).json()["hits"]
    assert hits[0]["doc_id"] == "arcd-000-0"

    echoed = load_engine(echo.model_uri)
    assert isinstance(echoed, PredictEngine)
    app = TestClient(create_app(echoed))
    body = app.post("/ask", json={"question": "q?"}).json()
    assert (body["answer"], body["citations"], body["hits"]) == ("echo: q?", ["a.pdf"], [])
    assert app.post("/search", json={"question": "q?"}).status_code == 501
    with pytest.raises(composer.ComposerError, match="models:/missing@prod: cannot load the model"):
        load_engine("models:/missing@prod")


def test_the_serve_command_serves_until_stopped(tmp_path: Path) -> None:
    config = tmp_path / "pipeline.yaml"
    config.write_text(json.dumps(BM25))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    missing = subprocess.run([sys.executable, "-m", "composer", "serve", str(config)], env=env,
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "a pipeline config needs --corpus" in missing.stderr
    assert "Traceback" not in missing.stderr
    port = free_port()
    command = [sys.executable, "-m", "composer", "serve", str(config), "--corpus", str(CORPUS),
               "--port", str(port), "--max-k", "7"]
    server = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    assert json.load(r)["model"] == "pipeline"
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline
                time.sleep(0.2)
        reply = httpx.post(f"http://127.0.0.1:{port}/ask", json={"question": QUESTION}).json()
        assert "صحفي" in reply["answer"]
        too_many = httpx.post(f"http://127.0.0.1:{port}/search", json={"question": QUESTION, "k": 8})
        assert too_many.json() == {"detail": "k: 8 is out of range 1..7 (--max-k)"}
        rebound = httpx.get(f"http://127.0.0.1:{port}/health", headers={"Host": "evil.example"})
        assert rebound.status_code == 421  # a loopback bind answers loopback names only (DNS rebinding)
        assert httpx.head(f"http://localhost:{port}/health").status_code == 200
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
    assert f"serving pipeline (extractive) at http://127.0.0.1:{port}/" in err
