"""The embedding cache in PostgreSQL (``caches:``) beside the SQLite file: one interface, the same keys,
a chunk encoded once per model per cluster, damaged vectors dropped and encoded again."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from composer.embedding import CachedEmbedder, EmbeddingCache
from composer.embedding.base import PrefixedEmbedder

PASSWORD = "s3cret-Emb-Pw"
ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["مرحبا بالعالم", "سلام دنیا", "hello world", "جمال خاشقجي", "مرحبا بالعالم"]


class Hashing(PrefixedEmbedder):
    """A deterministic 8-dim embedder that counts what it encodes."""

    def __init__(self) -> None:
        super().__init__()
        self.encoded = 0

    @property
    def identity(self) -> str:
        return "test:hashing-8"

    @property
    def dim(self) -> int:
        return 8

    def _encode(self, texts: list[str]) -> np.ndarray:
        self.encoded += len(texts)
        return np.array([[(sum(t.encode()) * (i + 1)) % 97 + 1.0 for i in range(8)] for t in texts])


@pytest.fixture(scope="module")
def caches() -> Iterator[str]:
    """A PostgreSQL database for this module's caches, its URL holding a password (trust auth ignores it)."""
    from postgres import caches_database

    with caches_database(PASSWORD) as url:
        yield url


def sql(url: str, statement: str) -> list[tuple[Any, ...]]:
    import psycopg2
    from sqlalchemy.engine import make_url

    u = make_url(url)
    conn = psycopg2.connect(host=u.host, port=u.port, user=u.username, dbname=u.database)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(statement)
            return list(cur.fetchall()) if cur.description else []
    finally:
        conn.close()


def cache_of(kind: str, tmp_path: Path, caches: str, name: str) -> EmbeddingCache:
    return EmbeddingCache(tmp_path / name, caches=caches if kind == "postgres" else None)


def damage(kind: str, cache: EmbeddingCache, caches: str, how: str) -> None:
    """Cut the first stored vector's bytes, or write a NaN into it."""
    table = cache._tables["vectors"]
    if kind == "postgres":
        first = f"(SELECT key FROM {table} ORDER BY key LIMIT 1)"
        value = ("substring(vector from 1 for 10)" if how == "cut"
                 else "overlay(vector placing '\\x0000c07f'::bytea from 1 for 4)")
        sql(caches, f"UPDATE {table} SET vector = {value} WHERE key = {first}")
    else:
        store = cache._store
        (key, blob), = store.query(f"SELECT key, vector FROM {table} ORDER BY key LIMIT 1")
        bad = blob[:10] if how == "cut" else np.float32("nan").tobytes() + blob[4:]
        store.execute(f"UPDATE {table} SET vector = ? WHERE key = ?", (bad, key))


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
@pytest.mark.parametrize("how", ["cut", "nan"])
def test_a_damaged_vector_is_dropped_and_encoded_again(
    kind: str, how: str, caches: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    name = f"emb_{kind}_{how}"  # its own tables in the module's database
    embedder = Hashing()
    first = CachedEmbedder(embedder, cache_of(kind, tmp_path, caches, name)).encode_passages(TEXTS)
    assert embedder.encoded == 4
    cache = cache_of(kind, tmp_path, caches, name)
    damage(kind, cache, caches, how)
    with caplog.at_level(logging.WARNING, logger="composer.embedding"):
        again = CachedEmbedder(embedder, cache).encode_passages(TEXTS)
    assert embedder.encoded == 5  # the damaged one alone, encoded again
    assert np.array_equal(again, first)
    assert "1 damaged vectors" in caplog.text and PASSWORD not in caplog.text
    assert len(cache) == 4
    CachedEmbedder(embedder, cache).encode_passages(TEXTS)
    assert embedder.encoded == 5  # and stored whole


def test_postgres_and_sqlite_give_the_same_vectors_under_the_same_keys(caches: str, tmp_path: Path) -> None:
    shared = CachedEmbedder(Hashing(), EmbeddingCache(tmp_path / "same", caches=caches)).encode_queries(TEXTS)
    local = CachedEmbedder(Hashing(), EmbeddingCache(tmp_path / "same")).encode_queries(TEXTS)
    assert np.array_equal(shared, local)
    keys = {bytes(r[0]) for r in sql(caches, "SELECT key FROM composer_same_vectors")}
    file_keys = {r[0] for r in EmbeddingCache(tmp_path / "same")._store.query("SELECT key FROM vectors")}
    assert keys == file_keys and len(keys) == 4


def test_a_second_process_encodes_nothing_the_first_encoded(caches: str, tmp_path: Path) -> None:
    first = Hashing()
    cache = EmbeddingCache(tmp_path / "a" / "shared", caches=caches)
    vectors = CachedEmbedder(first, cache).encode_passages(TEXTS)
    assert first.encoded == 4
    script = (
        "import json, sys\n"
        "sys.path.insert(0, sys.argv[3])\n"
        "from test_shared_embedding_cache import Hashing, TEXTS\n"
        "from composer.embedding import CachedEmbedder, EmbeddingCache\n"
        "embedder = Hashing()\n"
        "cached = CachedEmbedder(embedder, EmbeddingCache(sys.argv[1], caches=sys.argv[2]))\n"
        "vectors = cached.encode_passages(TEXTS)\n"
        "print(json.dumps({'encoded': embedder.encoded, 'reused': cached.reused,\n"
        "                  'vectors': vectors.tolist()}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "b" / "shared"), caches, str(Path(__file__).parent)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["encoded"] == 0 and seen["reused"] == len(TEXTS)
    assert np.array_equal(np.array(seen["vectors"], dtype=np.float32), vectors)


def test_a_workspace_keeps_its_caches_where_use_caches_says(caches: str, tmp_path: Path) -> None:
    from composer.llm import LLMConfig
    from composer.pipeline.workspace import Workspace, use_caches

    use_caches(tmp_path, caches)
    try:
        workspace = Workspace.get(tmp_path, ":memory:")
        assert workspace.embeddings.where.endswith("(composer_embeddings_vectors)")
        assert workspace.rerank_scores.where.endswith("(composer_rerank_vectors)")
        client = workspace.client(LLMConfig(model="openai/fake"))
        assert client.cache is not None and client.cache.where.endswith("(composer_llm_replies)")
        assert PASSWORD not in workspace.embeddings.where + client.cache.where
        assert not (tmp_path / "cache").exists()  # no SQLite file beside the tables
    finally:
        use_caches(tmp_path, None)
        workspace.close()
    local = Workspace.get(tmp_path, ":memory:")
    assert local.embeddings.where == str(tmp_path / "cache" / "embeddings" / "embeddings.sqlite3")
    local.close()


def test_record_model_dim_is_shared(caches: str, tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "dims", caches=caches)
    cache.record_model_dim("m", 8)
    cache.record_model_dim("m", 9)  # idempotent: the first stays
    assert EmbeddingCache(tmp_path / "other" / "dims", caches=caches).model_dim("m") == 8



def test_processes_and_threads_writing_the_same_chunks_at_once_store_each_once(
    caches: str, tmp_path: Path
) -> None:
    """Three processes of four threads each put overlapping blocks (ON CONFLICT DO NOTHING): no error, no
    row lost, none twice."""
    script = (
        "import sys, threading\n"
        "import numpy as np\n"
        "from composer.embedding import EmbeddingCache, cache_key\n"
        "cache = EmbeddingCache(sys.argv[1], caches=sys.argv[2])\n"
        "def put(offset):\n"
        "    for start in range(offset, 300, 50):\n"
        "        keys = [cache_key('m', 'passage', '', f'chunk {i}') for i in range(start, start + 50)]\n"
        "        keys = keys[::-1] if offset % 20 else keys\n"
        "        cache.put_many(keys, np.full((50, 8), 1.0, dtype=np.float32))\n"
        "threads = [threading.Thread(target=put, args=(o,)) for o in (0, 10, 20, 30)]\n"
        "[t.start() for t in threads]\n"
        "[t.join() for t in threads]\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "race"), caches], cwd=ROOT)
             for _ in range(3)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    assert len(EmbeddingCache(tmp_path / "race", caches=caches)) == 330  # chunks 0..329, each once
