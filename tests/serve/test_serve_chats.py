"""`composer serve` answering chats: a follow-up searched with the history its messages carry, `/ask` with a
`history`, the answer streamed token by token as the LLM writes it, a history over the cap refused in one
line, and a conversation's traces sharing one MLflow session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import FakeLLMServer, server_error
from fastapi.testclient import TestClient

import composer
from composer.data import load_corpus
from composer.llm import LLMConfig
from composer.pipeline.pipeline import Pipeline
from composer.serve import PipelineEngine, create_app

DOCS = [
    {"id": "khashoggi", "text": "جمال خاشقجي صحفي سعودي بارز كتب في صحف عربية وأجنبية. "
                                "توفي خاشقجي في إسطنبول عام 2018."},
    {"id": "shawqi", "text": "توفي الشاعر أحمد شوقي عام 1932 في القاهرة، وتوفي بعده حافظ إبراهيم."},
    {"id": "nile", "text": "نهر النيل أطول نهر في أفريقيا ويمر في مصر والسودان."},
]
FIRST = "من هو جمال خاشقجي؟"
FOLLOW_UP = "ومتى توفي؟"
"""Alone, the follow-up finds the poet's passage (it says توفي twice); with its history, the journalist's."""
CHAT = [{"role": "system", "content": "أجب بإيجاز."}, {"role": "user", "content": FIRST},
        {"role": "assistant", "content": "صحفي سعودي."}, {"role": "user", "content": FOLLOW_UP}]
ANSWER = "توفي خاشقجي في إسطنبول عام 2018 بحسب المقطع الأول من السياق"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("chats") / "corpus.jsonl"
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in DOCS), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def client(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    config = {"retrieval": {"mode": "bm25", "k": 3}, "generation": {"max_contexts": 1}}
    pipe = composer.load_pipeline(config, corpus, workdir=tmp_path_factory.mktemp("work"))
    return TestClient(create_app(PipelineEngine(pipe, "chats")))


def llm_pipeline(server: FakeLLMServer, corpus: Path, workdir: Path) -> Pipeline:
    config = {"retrieval": {"mode": "bm25", "k": 3},
              "generation": {"model": "openai/fake", "api_base": server.url, "max_contexts": 1}}
    fast = LLMConfig(model="openai/fake", timeout=5, backoff_base=0.01, backoff_max=0.02, max_retries=1)
    pipe = Pipeline.from_config(config, workdir=workdir, llm=fast)
    pipe.index(load_corpus(corpus))
    return pipe


def events(text: str) -> list[Any]:
    """An SSE body's events: each ``data:`` line's JSON, ``[DONE]`` as the string."""
    out: list[Any] = []
    for event in filter(None, text.split("\n\n")):
        assert event.startswith("data: "), event
        data = event[len("data: "):]
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_a_chat_follow_up_is_answered_from_the_passage_its_history_points_to(client: TestClient) -> None:
    alone = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": FOLLOW_UP}]})
    assert alone.json()["citations"] == ["shawqi"]  # the follow-up's own words find the wrong passage
    chat = client.post("/v1/chat/completions", json={"messages": CHAT})
    assert chat.status_code == 200, chat.text
    assert chat.json()["citations"] == ["khashoggi"]
    assert "2018" in chat.json()["choices"][0]["message"]["content"]
    for history in ([{"role": "user", "text": FIRST}, {"role": "assistant", "text": "صحفي سعودي."}],
                    [{"role": "user", "content": FIRST}]):
        asked = client.post("/ask", json={"question": FOLLOW_UP, "history": history}).json()
        assert asked["citations"] == ["khashoggi"] and asked["hits"][0]["id"].startswith("khashoggi")
    streamed = events(client.post("/v1/chat/completions", json={"messages": CHAT, "stream": True}).text)
    assert streamed[-2]["citations"] == ["khashoggi"] and streamed[-1] == "[DONE]"


@pytest.mark.parametrize(("path", "body", "env", "detail"), [
    ("/v1/chat/completions", {"messages": CHAT}, {"COMPOSER_MAX_HISTORY_TURNS": "1"},
     "messages: a history of 2 turns is over the cap of 1 ($COMPOSER_MAX_HISTORY_TURNS)"),
    ("/ask", {"question": FOLLOW_UP, "history": [{"role": "user", "text": FIRST}] * 3},
     {"COMPOSER_MAX_HISTORY_TURNS": "2"},
     "history: a history of 3 turns is over the cap of 2 ($COMPOSER_MAX_HISTORY_TURNS)"),
    ("/ask", {"question": FOLLOW_UP, "history": [{"role": "user", "text": FIRST}]},
     {"COMPOSER_MAX_HISTORY_CHARS": "10"},
     "history: a history of 18 characters is over the cap of 10 ($COMPOSER_MAX_HISTORY_CHARS)"),
    ("/ask", {"question": FOLLOW_UP, "history": [{"role": "user", "text": FIRST, "content": FIRST}]}, {},
     "history.0: give the turn's text as 'text' or 'content' (one of them)"),
    ("/ask", {"question": FOLLOW_UP, "history": [{"role": "system", "text": FIRST}]}, {},
     "history.0.role: Input should be 'user' or 'assistant'"),
])
def test_a_history_over_the_cap_or_malformed_is_a_422_with_one_line(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, path: str, body: dict[str, Any], env: dict[str, str],
    detail: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    r = client.post(path, json=body)
    assert (r.status_code, r.json()) == (422, {"detail": detail})


def test_a_streamed_answer_arrives_as_the_llm_writes_it(corpus: Path, tmp_path: Path) -> None:
    with FakeLLMServer(lambda req: ANSWER) as server:
        pipe = llm_pipeline(server, corpus, tmp_path)
        app = TestClient(create_app(PipelineEngine(pipe, "llm")))
        r = app.post("/v1/chat/completions", json={"messages": CHAT, "stream": True})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        got = events(r.text)
        pieces = [e["choices"][0]["delta"].get("content") for e in got[1:-2]]
        assert len(pieces) > 1 and all(pieces)  # token by token, not one chunk after generation
        assert "".join(pieces) == ANSWER
        assert got[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert got[-2]["choices"][0]["finish_reason"] == "stop" and got[-2]["citations"] == ["khashoggi"]
        assert len({e["id"] for e in got[:-1]}) == 1 and got[-1] == "[DONE]"
        sent = server.received[-1]
        assert sent.body["stream"] is True and "خاشقجي في إسطنبول" in sent.prompt  # the history's passage
        assert "صحفي سعودي." in sent.prompt  # and the conversation so far, as an unstreamed answer shows it
        client = pipe.generator.client if pipe.generator is not None else None
        assert client is not None and client.usage.requests == 1 and client.usage.completion_tokens > 0
        requests = server.chat_requests
        plain = app.post("/v1/chat/completions", json={"messages": CHAT}).json()
        assert plain["choices"][0]["message"]["content"] == ANSWER  # the streamed reply, cached once whole
        again = events(app.post("/v1/chat/completions", json={"messages": CHAT, "stream": True}).text)
        assert [e["choices"][0]["delta"].get("content") for e in again[1:-2]] == [ANSWER]  # cached: one piece
        assert server.chat_requests == requests
        server.enqueue(server_error(500), server_error(500))
        nile = [{"role": "user", "content": "ما هو أطول نهر في أفريقيا؟"}]
        failed = app.post("/v1/chat/completions", json={"messages": nile, "stream": True})
        assert failed.status_code == 502 and "the pipeline's LLM failed" in failed.json()["detail"]


@pytest.mark.slow
def test_a_conversations_traces_share_its_mlflow_session(corpus: Path, tmp_path: Path) -> None:
    import mlflow
    from mlflow.tracing.constant import TraceMetadataKey

    from composer.serve.tracing import Tracer

    SESSION_METADATA = TraceMetadataKey.TRACE_SESSION

    pipe = composer.load_pipeline({"retrieval": {"mode": "bm25", "k": 3}}, corpus, workdir=tmp_path / "work")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    app = TestClient(create_app(PipelineEngine(pipe, "chats"), tracer=Tracer("prod", uri, "chats")))
    first = [{"role": "user", "content": FIRST}]
    for body in ({"messages": first}, {"messages": CHAT}, {"messages": CHAT, "stream": True},
                 {"messages": CHAT, "conversation_id": "conv-7"},
                 {"messages": CHAT, "metadata": {"conversation_id": "conv-8"}}):
        assert app.post("/v1/chat/completions", json=body).status_code == 200
    assert app.post("/ask", json={"question": FOLLOW_UP, "history": [{"role": "user", "text": FIRST}]}
                    ).status_code == 200
    mlflow.flush_trace_async_logging()
    experiment = mlflow.get_experiment_by_name("prod")
    assert experiment is not None
    traces = mlflow.search_traces(locations=[experiment.experiment_id], return_type="list")
    sessions = [t.info.trace_metadata.get(SESSION_METADATA) for t in
                sorted(traces, key=lambda t: t.info.request_time)]
    derived = sessions[0]
    assert derived is not None and derived.startswith("chat-")
    assert sessions == [derived, derived, derived, "conv-7", "conv-8", derived]  # a conversation: one session
    streamed = next(t for t in traces if t.data.spans[0].outputs and t.data.spans[0].inputs.get("history")
                    and t.info.trace_metadata.get(SESSION_METADATA) == derived)
    assert streamed.data.spans[0].inputs["history"][0] == {"role": "user", "text": FIRST}


class EndlessEngine:
    """Streams pieces until told to stop: what a client that leaves mid-answer must stop."""

    name, answerer, can_search = "endless", "test", False

    def __init__(self) -> None:
        self.closed = False

    def search(self, question: str, k: int | None) -> Any:
        raise AssertionError("not searched")

    def ask(self, question: str, history: Any = ()) -> Any:
        raise AssertionError("streamed only")

    def stream(self, question: str, history: Any = ()) -> Any:
        try:
            while True:
                yield "كلمة "
        finally:
            self.closed = True


def test_a_client_that_leaves_mid_stream_stops_the_llms_stream() -> None:
    engine = EndlessEngine()
    with TestClient(create_app(engine)) as app, app.stream("POST", "/v1/chat/completions",
                    json={"messages": [{"role": "user", "content": "سؤال"}], "stream": True}) as r:
        for n, _ in enumerate(r.iter_lines()):
            if n > 5:
                break
    assert engine.closed
