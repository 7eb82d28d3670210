"""The LLM reply cache in PostgreSQL (``caches:``): one reply paid for once per cluster, damaged rows
dropped and asked again, the URL's password never in a message."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_llm_server import FakeLLMServer

from composer.errors import ConfigError
from composer.llm import LLMClient, LLMConfig
from composer.llm.cache import SHARED_TABLE, CachedReply, LLMCache

KEY_ENV = "COMPOSER_TEST_LLM_KEY"
PASSWORD = "s3cret-Pg-Pw"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def caches() -> Iterator[str]:
    """A PostgreSQL database for this module's caches, its URL holding a password (trust auth ignores it)."""
    from postgres import caches_database

    with caches_database(PASSWORD) as url:
        yield url


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-shared-cache")


@pytest.fixture()
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(lambda req: f"echo: {req.prompt}") as srv:
        yield srv


def settings(server: FakeLLMServer) -> dict[str, object]:
    return {"model": "openai/fake-model", "api_base": server.url, "api_key_env": KEY_ENV, "timeout": 5.0}


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def sql(url: str, statement: str, params: tuple[object, ...] = ()) -> None:
    import psycopg2
    from sqlalchemy.engine import make_url

    u = make_url(url)
    conn = psycopg2.connect(host=u.host, port=u.port, user=u.username, dbname=u.database)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(statement, params)
    finally:
        conn.close()


def test_a_second_process_on_the_same_database_sends_no_request(
    caches: str, server: FakeLLMServer, tmp_path: Path
) -> None:
    sql(caches, f"DROP TABLE IF EXISTS {SHARED_TABLE}")
    batch = [ask(f"question {i}") for i in range(5)]
    first = LLMClient(LLMConfig.model_validate(settings(server)), cache_dir=tmp_path / "a", caches=caches)
    assert all(r.ok and not r.cached for r in first.complete_many(batch))
    assert server.chat_requests == 5
    assert first.cache is not None and len(first.cache) == 5
    # Another process, its own work dir (another machine's): every reply comes from the shared table.
    script = (
        "import json, sys\n"
        "from composer.llm import LLMClient, LLMConfig\n"
        "client = LLMClient(LLMConfig.model_validate(json.loads(sys.argv[1])), cache_dir=sys.argv[2], "
        "caches=sys.argv[3])\n"
        "results = client.complete_many([[{'role': 'user', 'content': f'question {i}'}] for i in range(5)])\n"
        "print(json.dumps([[r.text, r.cached] for r in results]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, json.dumps(settings(server)), str(tmp_path / "b"), caches],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ},
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [[f"echo: question {i}", True] for i in range(5)]
    assert server.chat_requests == 5
    assert not (tmp_path / "b" / "replies.sqlite").exists()  # nothing cached beside the table
    assert PASSWORD not in out.stderr


def test_a_damaged_row_is_dropped_and_asked_again_with_a_warning_naming_no_password(
    caches: str, server: FakeLLMServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = LLMConfig.model_validate(settings(server))
    client = LLMClient(config, cache_dir=tmp_path, caches=caches)
    assert client.complete(ask("damaged")).text == "echo: damaged"
    sql(caches, f"UPDATE {SHARED_TABLE} SET text = '' WHERE text = 'echo: damaged'")
    with caplog.at_level(logging.WARNING, logger="composer.llm"):
        again = client.complete(ask("damaged"))
    assert again.text == "echo: damaged" and not again.cached
    assert server.chat_requests == 2
    assert "empty reply text" in caplog.text and SHARED_TABLE in caplog.text
    assert PASSWORD not in caplog.text and "***@" in caplog.text
    assert client.usage.cache_rejected == 1
    assert client.complete(ask("damaged")).cached  # stored again, whole
    assert server.chat_requests == 2


def test_puts_are_idempotent_and_counts_are_exact(caches: str) -> None:
    cache = LLMCache("unused", caches=caches)
    cache.put("k-idem", "m", CachedReply("first", 1, 2, 0.5))
    cache.put("k-idem", "m", CachedReply("second", 3, 4, None))
    hit = cache.get("k-idem")
    assert hit == CachedReply("second", 3, 4, None)
    assert cache.where.endswith(f"({SHARED_TABLE})") and PASSWORD not in cache.where


def test_an_unreachable_database_is_one_line_without_the_password(tmp_path: Path) -> None:
    from postgres import free_port

    url = f"postgresql://composer:{PASSWORD}@127.0.0.1:{free_port()}/none"
    with pytest.raises(ConfigError) as err:
        LLMCache(tmp_path / "replies.sqlite", caches=url)
    message = str(err.value)
    assert "caches: cannot use postgresql://***@127.0.0.1" in message
    assert PASSWORD not in message and "\n" not in message


STUDY_SPACE = """
defaults:
  retrieval: {{mode: dense}}
  embedding: {{provider: sentence-transformers, model: {model}}}
dimensions:
  retrieval.k: {{choices: [3, 5]}}
"""
STUDY = """
name: shared
corpus: {corpus}
questions: questions.jsonl
search_space: space.yaml
objective: {{k: 5, metrics: {{recall: 1, answer_correctness: 1}}}}
sampler: {{name: grid, seed: null}}
pruner: none
n_trials: 2
mlflow: {{traces: 0}}
caches: {caches}
llm:
  model: openai/fake
  api_base: {url}
  api_key_env: COMPOSER_TEST_LLM_KEY
judge:
  metrics: [answer_correctness]
"""


@pytest.mark.slow
def test_a_second_study_on_the_same_caches_encodes_nothing_and_asks_nothing(
    caches: str, fake_llm: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Two studies in two work dirs (two machines' local state) share the PostgreSQL caches: the
    second encodes 0 chunks and sends 0 LLM requests; the password reaches no MLflow store or log."""
    import optuna
    from tiny_models import ARABIC_PIECES, save_tiny_sentence_transformer
    from typer.testing import CliRunner

    from composer.cli.app import app
    from composer.study.experiment import load_experiment
    from composer.study.finish import encode_summary

    model = save_tiny_sentence_transformer(tmp_path_factory.mktemp("tiny"), ARABIC_PIECES)
    sample = ROOT / "examples" / "arcd-sample"
    lines = (sample / "questions.jsonl").read_text(encoding="utf-8").splitlines()[:6]
    computed, requests, outputs = [], [], []
    for name in ("first", "second"):
        root = tmp_path_factory.mktemp(name)
        (root / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (root / "space.yaml").write_text(STUDY_SPACE.format(model=model), encoding="utf-8")
        exp_file = root / "experiment.yaml"
        exp_file.write_text(STUDY.format(corpus=sample / "corpus.jsonl", caches=caches, url=fake_llm.url),
                            encoding="utf-8")
        before = fake_llm.chat_requests
        result = CliRunner().invoke(app, ["optimize", str(exp_file)])
        assert result.exit_code == 0, result.output
        outputs.append(result.output)
        requests.append(fake_llm.chat_requests - before)
        study = optuna.load_study(study_name="shared", storage=load_experiment(exp_file).storage_url)
        computed.append(encode_summary(study.get_trials(deepcopy=False)).embeddings_computed)
        stored = b"".join(p.read_bytes() for p in (root / ".composer").rglob("*") if p.is_file())
        assert PASSWORD.encode() not in stored
    assert computed[0] > 0 and requests[0] > 0
    assert computed[1] == 0 and requests[1] == 0, (computed, requests)
    assert all(PASSWORD not in out for out in outputs)


def test_a_study_with_an_unusable_caches_url_exits_2_before_it_starts(tmp_path: Path) -> None:
    from sample_study import write_experiment
    from typer.testing import CliRunner

    from composer.cli.app import app

    exp_file = write_experiment(tmp_path, caches=str(tmp_path / "caches.sqlite3"))
    result = CliRunner().invoke(app, ["optimize", str(exp_file)])
    assert result.exit_code == 2, result.output
    assert "is not a postgresql:// URL" in result.output and "Traceback" not in result.output
    assert not (tmp_path / ".composer" / "optuna.db").exists()  # nothing half-written
