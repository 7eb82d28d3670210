"""`composer serve` against a hostile client (issue 41): a Host allow-list and an optional bearer token,
connections that send nothing or half a request closed on a deadline and capped in number (real sockets on
127.0.0.1 against a real server), a lone surrogate refused by the library too, and a registered model's
temporary work dir removed on SIGTERM and SIGHUP."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from test_mlflow_model import registered  # noqa: F401 -- the module-scoped registered model fixture
from test_serve import free_port
from tiny_models import ARABIC_PIECES, save_tiny_sentence_transformer
from typer.testing import CliRunner

import composer
from composer.cli.app import app as cli
from composer.data.types import Turn
from composer.serve import create_app
from composer.serve.engine import Reply, Timed
from composer.serve.guard import LOOPBACK_HOSTS, Access, Connections, server

TOKEN = "serve-token-0123456789"


class SlowEngine:
    """Answers every question after ``seconds``: a pipeline whose LLM takes its time."""

    name, answerer, can_search = "slow", "test", False

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def search(self, question: str, k: int | None) -> Timed:
        raise AssertionError("not searched")

    def ask(self, question: str, history: Sequence[Turn] = ()) -> Timed:
        time.sleep(self.seconds)
        return Timed(Reply(f"answer to {question}", "en"), self.seconds)


@contextmanager
def running(limits: Connections, seconds: float = 0.0) -> Iterator[int]:
    """A real server (``composer serve``'s) on a free 127.0.0.1 port, in a thread; its port."""
    srv = server(create_app(SlowEngine(seconds)), "127.0.0.1", free_port(), limits)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    while not srv.started:
        time.sleep(0.01)
    try:
        yield srv.config.port
    finally:
        srv.should_exit = True
        thread.join(10)


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``sock`` within ``seconds`` (what it sent before is read and dropped)."""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def test_connections_that_send_nothing_or_half_a_request_are_closed_on_a_deadline() -> None:
    with running(Connections(request_timeout_s=0.5), seconds=1.0) as port:
        silent = socket.create_connection(("127.0.0.1", port))
        half_head = socket.create_connection(("127.0.0.1", port))
        half_head.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        half_body = socket.create_connection(("127.0.0.1", port))
        half_body.sendall(b"POST /ask HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          b"Content-Length: 100\r\n\r\n{")
        started = time.monotonic()
        assert all(closed_within(s, 5) for s in (silent, half_head, half_body))
        assert time.monotonic() - started < 3
        # a whole request is answered however long the pipeline takes (1 s, past the 0.5 s deadline)
        reply = httpx.post(f"http://127.0.0.1:{port}/ask", json={"question": "q"}, timeout=10)
        assert reply.json()["answer"] == "answer to q"
        for s in (silent, half_head, half_body):
            s.close()


def test_past_the_connection_cap_the_longest_waiting_connection_makes_room() -> None:
    with running(Connections(request_timeout_s=30, max_connections=3), seconds=1.0) as port:
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        time.sleep(0.2)  # all three accepted, the first the oldest
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
        assert health.json()["model"] == "slow"  # a real client gets in
        assert closed_within(idle[0], 2) and not closed_within(idle[2], 0.3)
        for s in idle:
            s.close()
        time.sleep(0.2)
        # every slot answering a request: a new connection is told so, not left hanging
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=10) as http, ThreadPoolExecutor(3) as pool:
            busy = [pool.submit(http.post, "/ask", json={"question": str(i)}) for i in range(3)]
            time.sleep(0.4)
            refused = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
            assert refused.status_code == 503
            assert refused.json() == {"detail": "too many open connections (--max-connections): try again"}
            assert [b.result().status_code for b in busy] == [200, 200, 200]


def test_a_host_outside_the_allow_list_is_a_421_and_the_token_is_required() -> None:
    app = create_app(SlowEngine(0), access=Access(TOKEN, LOOPBACK_HOSTS))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for base in ("http://127.0.0.1:8000", "http://localhost", "http://[::1]:8000", "http://LOCALHOST:1"):
        reply = TestClient(app, base_url=base).post("/ask", json={"question": "q"}, headers=auth)
        assert reply.status_code == 200, base
    evil = TestClient(app, base_url="http://evil.example:8000")
    r = evil.post("/ask", json={"question": "q"}, headers=auth)
    assert r.status_code == 421
    assert r.json() == {"detail": "Host 'evil.example:8000' is not served here: allowed 127.0.0.1, ::1, "
                                  "localhost (--allowed-host)"}
    assert evil.get("/health").status_code == 421
    local = TestClient(app, base_url="http://127.0.0.1:8000")
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        r = local.post("/ask", json={"question": "q"}, headers=headers)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert r.json() == {"detail": "missing or wrong token: send 'Authorization: Bearer <token>' "
                                      "(--token-env)"}
    assert local.get("/docs").status_code == 401
    assert local.get("/health").json()["status"] == "ok"  # open: load balancers carry no secret
    anyone = TestClient(create_app(SlowEngine(0), access=Access(None, ("*",))), base_url="http://evil.example")
    assert anyone.get("/health").status_code == 200


def test_the_token_is_read_from_the_environment_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COMPOSER_SERVE_TOKEN", raising=False)
    args = ["serve", str(tmp_path / "p.yaml"), "--token-env", "COMPOSER_SERVE_TOKEN"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert "--token-env COMPOSER_SERVE_TOKEN: the environment variable is not set or empty" in result.output
    assert "Traceback" not in result.output


def test_a_lone_surrogate_is_an_input_error_in_a_dense_pipeline(tmp_path: Path) -> None:
    tiny = save_tiny_sentence_transformer(tmp_path / "models", ARABIC_PIECES)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"id": f"d{i}", "text": f"نص رقم {i} عن جدة"}, ensure_ascii=False)
                                for i in range(3)), "utf-8")
    config = {"embedding": {"provider": "sentence-transformers", "model": str(tiny)},
              "retrieval": {"mode": "dense", "k": 2}}
    pipe = composer.load_pipeline(config, corpus, workdir=tmp_path / "work")
    assert pipe.search("جدة")
    message = "text to embed or rerank: invalid text (lone surrogate U+DCFF at character 3)"
    for call in (pipe.search, pipe.ask):
        with pytest.raises(composer.InputError) as error:
            call("جد\udcff")
        assert str(error.value) == message


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_served_models_work_dir_is_removed_on_sigterm_and_sighup(
    registered: tuple[str, Path], tmp_path: Path, sig: signal.Signals  # noqa: F811
) -> None:
    tracking, _ = registered
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking, "HF_HUB_OFFLINE": "1", "TMPDIR": str(temp),
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    port = free_port()
    command = [sys.executable, "-m", "composer", "serve", "models:/qa-model@champion", "--port", str(port)]
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.2)
        assert [p.name[:15] for p in temp.iterdir()] == ["composer-model-"]
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err
    assert list(temp.iterdir()) == []
