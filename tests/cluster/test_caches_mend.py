"""What ``caches:`` refuses and what reads it: a malformed URL is one line naming ``caches`` (its
password never shown), and ``--estimate`` counts the replies the shared cache already holds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import FakeLLMServer
from sample_study import write_experiment, write_questions
from scripted_llm import ScriptedRAG, golds_of
from typer.testing import CliRunner

from composer.cli.app import app
from composer.errors import ConfigError
from composer.rdb_store import PostgresStore

PASSWORD = "s3cret-Pg-Pw"


@pytest.mark.parametrize("url", [f"postgresql://u:{PASSWORD}@h:abc/db", f"postgresql://u:{PASSWORD}@[::1/db"])
def test_a_malformed_caches_url_is_one_line_naming_caches(url: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^field 'caches': caches: ") as raised:
        PostgresStore(url, ())
    assert PASSWORD not in str(raised.value)
    result = CliRunner().invoke(app, ["optimize", str(write_experiment(tmp_path, caches=url))])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "caches" in lines[0] and PASSWORD not in result.output, result.stderr
    assert not (tmp_path / ".composer").exists()


@pytest.fixture(scope="module")
def caches() -> Iterator[str]:
    from postgres import caches_database

    with caches_database() as url:
        yield url


def test_the_estimate_counts_the_replies_the_shared_cache_holds(caches: str, tmp_path: Path) -> None:
    golds = golds_of(write_questions(tmp_path, 6))
    dims = {"generation.template": {"choices": ["grounded", "concise"]}, "retrieval.k": {"choices": [2, 4]}}
    with FakeLLMServer(ScriptedRAG(golds)) as srv:
        fields: dict[str, Any] = {
            "dims": dims, "defaults": {"retrieval": {"mode": "bm25"}}, "n_questions": 6, "n_trials": 4,
            "sampler": {"name": "grid", "seed": None},
            "llm": {"model": "openai/fake", "api_base": srv.url, "price": {"input": 150.0, "output": 600.0}}}
        exp = write_experiment(tmp_path, caches=caches, **fields)
        first = estimated(exp)
        ran = CliRunner().invoke(app, ["optimize", str(exp)])
        assert ran.exit_code == 0, ran.output
        assert not (tmp_path / ".composer" / "cache" / "llm" / "replies.sqlite").exists()  # in PostgreSQL
        again = estimated(exp, "--study-name", "again")  # the same trials, their replies in the table
        # on a cluster, caches: unset is the study's PostgreSQL database: the same table
        cluster = write_experiment(tmp_path, file="cluster.yaml", storage=caches,
                                   executor={"ray": {"address": "auto"}}, **fields)
        on_cluster = estimated(cluster)
    assert first["cached"] == 0 and again["trials"] == 4 and again["cached"] > 0
    assert again["requests"] < first["requests"]
    assert on_cluster["cached"] == again["cached"]


def estimated(exp: Path, *extra: str) -> dict[str, Any]:
    out = CliRunner().invoke(app, ["optimize", str(exp), "--estimate", "--json", *extra])
    assert out.exit_code == 0, out.output
    est: dict[str, Any] = json.loads(out.stdout)
    return est
