"""One contract for every Qdrant backend: Qdrant Edge in a temp dir and qdrant-client's ``:memory:`` mode."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from composer.chunking import Chunk
from composer.errors import InputError
from composer.index import Bm25Encoder, ClientBackend, EdgeBackend, VectorIndex, open_index
from composer.index.base import UPSERT_BATCH, Found, Fusion, point_id

Factory = Callable[[], VectorIndex]
CHUNK_OF: dict[str, str] = {}
"""Point id -> chunk id of every chunk the tests index: searches answer with point ids alone."""


class Named(NamedTuple):
    id: str
    score: float


def named(results: list[Found]) -> list[list[Named]]:
    """Search results with the chunk id each point stands for."""
    return [[Named(CHUNK_OF[pid], score) for pid, score in hits] for hits in results]


@pytest.fixture(params=["edge", "memory"])
def make_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    """A factory: Edge reopens the same root (a new process would), ``:memory:`` hands back its one client."""
    opened: list[VectorIndex] = []
    memory = ClientBackend(":memory:") if request.param == "memory" else None

    def make() -> VectorIndex:
        backend: VectorIndex = memory if memory is not None else EdgeBackend(tmp_path / "qdrant")
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        backend.close()


def chunks_of(texts: list[str]) -> list[Chunk]:
    chunks = [
        Chunk(id=f"d{i}#0", doc_id=f"d{i}", text=t, start=0, end=len(t), index=0) for i, t in enumerate(texts)
    ]
    CHUNK_OF.update((point_id(c.id), c.id) for c in chunks)
    return chunks


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def build(
    backend: VectorIndex, name: str, texts: list[str], dense: np.ndarray | None = None, **meta: object
) -> Bm25Encoder:
    encoder, sparse = Bm25Encoder.fit(texts)
    backend.create(name, None if dense is None else dense.shape[1], {"bm25": encoder.to_dict(), **meta})
    backend.upsert(name, chunks_of(texts), dense, sparse)
    backend.finish(name)
    return encoder


def test_lifecycle_create_upsert_finish_reuse(make_backend: Factory) -> None:
    index = make_backend()
    assert not index.exists("c1")
    index.create("c1", 8, {"corpus": "x"})
    assert not index.exists("c1"), "an unfinished build must not count as an index"
    chunks = chunks_of(["alpha", "beta", "gamma"])
    index.upsert("c1", chunks, np.eye(3, 8, dtype=np.float32), Bm25Encoder.fit(c.text for c in chunks)[1])
    index.finish("c1")
    assert index.exists("c1")
    assert index.count("c1") == 3
    assert index.meta("c1") == {"corpus": "x"}
    # Re-upserting the same chunks overwrites them (point ids derive from chunk ids).
    index.upsert("c1", chunks[:2], np.eye(2, 8, dtype=np.float32), None)
    assert index.count("c1") == 3
    index.drop("c1")
    assert not index.exists("c1")


def test_upsert_in_batches(make_backend: Factory) -> None:
    index = make_backend()
    n = 2 * UPSERT_BATCH + 37
    rng = np.random.default_rng(1)
    texts = [f"doc number {i} word{i % 7}" for i in range(n)]
    chunks = chunks_of(texts)
    _, sparse = Bm25Encoder.fit(texts)
    vecs = rng.standard_normal((n, 16)).astype(np.float32)
    index.create("big", 16, {})
    index.upsert("big", chunks[:300], vecs[:300], sparse[:300])
    index.upsert("big", chunks[300:], vecs[300:], sparse[300:])
    index.finish("big")
    assert index.count("big") == n
    hits = named(index.search_dense("big", vecs[[5, n - 1]], 1))
    assert [h[0].id for h in hits] == ["d5#0", f"d{n - 1}#0"]


def test_dense_top_k_equals_numpy_exact_cosine(make_backend: Factory) -> None:
    index = make_backend()
    rng = np.random.default_rng(7)
    scale = rng.uniform(0.5, 3.0, (500, 1))
    docs = (rng.standard_normal((500, 32)) * scale).astype(np.float32)
    queries = rng.standard_normal((25, 32)).astype(np.float32)
    index.create("dense", 32, {})
    index.upsert("dense", chunks_of([f"t{i}" for i in range(500)]), docs, None)
    index.finish("dense")
    k = 10
    got = named(index.search_dense("dense", queries, k))
    sims = unit(queries) @ unit(docs).T  # cosine: stored vectors are not unit length
    for qi, hits in enumerate(got):
        expected = np.argsort(-sims[qi])[:k]
        assert [h.id for h in hits] == [f"d{j}#0" for j in expected]
        np.testing.assert_allclose([h.score for h in hits], sims[qi, expected], atol=1e-4)


def test_bm25_ranks_document_with_query_terms_first(make_backend: Factory) -> None:
    index = make_backend()
    texts = [
        "The river Nile flows north through Egypt to the Mediterranean Sea.",
        "Mount Everest is the highest mountain above sea level.",
        "The Amazon rainforest covers much of the Amazon basin in South America.",
        "Photosynthesis converts light energy into chemical energy in plants.",
    ]
    encoder = build(index, "en", texts)
    hits = named(index.search_bm25(
        "en", encoder.encode_queries(["Which river flows through Egypt?", "highest mountains"]), 3
    ))
    # Only documents sharing a (non-stopword, stemmed) token come back: "mountains" finds "mountain".
    assert [h.id for h in hits[0]] == ["d0#0"]
    assert [h.id for h in hits[1]] == ["d1#0"]
    assert hits[0][0].score > 0


def test_bm25_arabic_normalization(make_backend: Factory) -> None:
    index = make_backend()
    texts = [
        "ذَهَبَ أَحْمَدُ إلى المَدْرَسَةِ في عامِ ٢٠٢٠ مع أصدقائه",  # diacritics, hamza alef, Arabic-Indic digits
        "تقع مدينة القاهرة على ضفاف نهر النيل",
        "المكتبة العامة مفتوحة طوال أيام الأسبوع",
    ]
    encoder = build(index, "ar", texts)
    # Bare letters, no diacritics, alef without hamza, ASCII digits; "مدرسه" with heh for teh marbuta.
    hits = named(index.search_bm25("ar", encoder.encode_queries(["احمد مدرسه 2020", "القاهره والنيل"]), 3))
    assert hits[0][0].id == "d0#0"
    assert hits[1][0].id == "d1#0"
    assert hits[0][0].score > 0


def test_bm25_persian_normalization(make_backend: Factory) -> None:
    index = make_backend()
    texts = [
        "كتاب‌هاي فارسي در سال ۱۴۰۲ منتشر شدند",  # Arabic kaf/yeh, ZWNJ, Persian digits
        "تهران پایتخت ایران است و جمعیت زیادی دارد",
        "دانشجویان به کتابخانه دانشگاه می‌روند",
    ]
    encoder = build(index, "fa", texts)
    # The last is typed on an Arabic keyboard, ZWNJ as a space: read in Persian against the vocabulary.
    queries = ["کتابهای فارسی 1402", "پايتخت ايران كجاست؟", "دانشجويان مي روند"]
    vocabulary = {i for v in encoder.encode_documents(texts) for i in v.indices}
    hits = named(index.search_bm25("fa", encoder.encode_queries(queries, vocabulary), 3))
    assert [h[0].id for h in hits] == ["d0#0", "d1#0", "d2#0"]


def hybrid_fixture(index: VectorIndex) -> tuple[Bm25Encoder, np.ndarray]:
    rng = np.random.default_rng(3)
    texts = [f"common filler text number{i}" for i in range(60)]
    texts[17] = "zanzibar spice islands common filler"
    vecs = unit(rng.standard_normal((60, 24))).astype(np.float32)
    return build(index, "hy", texts, vecs), vecs


@pytest.mark.parametrize("fusion", ["rrf", "dbsf"])
def test_hybrid_fusion_prefers_document_topping_both_lists(make_backend: Factory, fusion: Fusion) -> None:
    index = make_backend()
    encoder, vecs = hybrid_fixture(index)
    dense_q = vecs[[17]] + 0.01
    sparse_q = encoder.encode_queries(["zanzibar spice"])
    assert named(index.search_dense("hy", dense_q, 1))[0][0].id == "d17#0"
    assert named(index.search_bm25("hy", sparse_q, 1))[0][0].id == "d17#0"
    fused = named(index.search_hybrid("hy", dense_q, sparse_q, 5, fusion=fusion, prefetch=10))
    assert len(fused) == 1 and len(fused[0]) == 5
    assert fused[0][0].id == "d17#0"
    if fusion == "rrf":
        # Qdrant scores rank r (0-based) of each branch 1/(rrf_k + r): first in both lists gives 2/60.
        assert fused[0][0].score == pytest.approx(2 / 60)
        assert all(h.score <= 1 / 60 + 1e-9 for h in fused[0][1:])
    dense_top = {h.id for h in named(index.search_dense("hy", dense_q, 10))[0]}
    sparse_top = {h.id for h in named(index.search_bm25("hy", sparse_q, 10))[0]}
    assert {h.id for h in fused[0]} <= dense_top | sparse_top


def test_hybrid_rrf_follows_each_branch_when_they_disagree(make_backend: Factory) -> None:
    index = make_backend()
    encoder, vecs = hybrid_fixture(index)
    # Dense points at d3, sparse at d17: equal RRF contributions, both must lead the fused list.
    fused = named(index.search_hybrid(
        "hy", vecs[[3]], encoder.encode_queries(["zanzibar"]), 2, fusion="rrf", rrf_k=60
    ))
    assert {h.id for h in fused[0]} == {"d3#0", "d17#0"}


def test_bm25_only_index_has_no_dense_search(make_backend: Factory) -> None:
    index = make_backend()
    encoder = build(index, "sparse", ["one two", "three four"])
    assert named(index.search_bm25("sparse", encoder.encode_queries(["three"]), 2))[0][0].id == "d1#0"
    with pytest.raises(ValueError, match="BM25-only"):
        named(index.search_dense("sparse", np.ones((1, 4), dtype=np.float32), 2))


def test_query_with_no_indexed_tokens_returns_nothing(make_backend: Factory) -> None:
    index = make_backend()
    encoder = build(index, "empty", ["alpha beta", "gamma delta"])
    assert named(index.search_bm25("empty", encoder.encode_queries(["the of and", "zeta"]), 5)) == [[], []]


def test_incomplete_build_is_detected_and_rebuilt(make_backend: Factory) -> None:
    index = make_backend()
    index.create("half", 4, {"try": 1})
    index.upsert("half", chunks_of(["a b", "c d"]), np.ones((2, 4), dtype=np.float32), None)
    # No finish(): as after a crash mid-build. A fresh opener must not reuse it either.
    reopened = make_backend()
    assert not reopened.exists("half")
    reopened.create("half", 4, {"try": 2})
    assert reopened.count("half") == 0
    reopened.upsert("half", chunks_of(["e f"]), np.ones((1, 4), dtype=np.float32), None)
    reopened.finish("half")
    assert reopened.exists("half") and reopened.count("half") == 1
    assert reopened.meta("half") == {"try": 2}


def test_mismatched_rows_are_refused(make_backend: Factory) -> None:
    index = make_backend()
    index.create("bad", 4, {})
    with pytest.raises(ValueError, match="shape"):
        index.upsert("bad", chunks_of(["a", "b"]), np.ones((3, 4), dtype=np.float32), None)
    with pytest.raises(ValueError, match="sparse"):
        index.upsert("bad", chunks_of(["a", "b"]), None, Bm25Encoder.fit(["a"])[1])


def test_edge_reopen_keeps_metadata_vectors_and_bm25_stats(tmp_path: Path) -> None:
    root = tmp_path / "qdrant"
    texts = [
        "القطط حيوانات أليفة تعيش مع البشر",
        "الأسود تعيش في السافانا الأفريقية",
        "الطيور تهاجر في الشتاء",
    ]
    vecs = unit(np.random.default_rng(5).standard_normal((3, 8))).astype(np.float32)
    first = EdgeBackend(root)
    encoder = build(first, "persist", texts, vecs, config={"k": 5})
    queries = ["القطط", "الاسود", "الطيور"]
    before = named(first.search_hybrid("persist", vecs, encoder.encode_queries(queries), 3))
    first.close()

    state = json.loads((root / "persist" / "meta.json").read_text(encoding="utf-8"))
    assert state["complete"] is True and state["dim"] == 8
    second = EdgeBackend(root)
    assert second.exists("persist") and second.count("persist") == 3
    meta = second.meta("persist")
    assert meta["config"] == {"k": 5}
    reloaded = Bm25Encoder.from_dict(meta["bm25"])
    assert reloaded == encoder
    after = named(second.search_hybrid("persist", vecs, reloaded.encode_queries(queries), 3))
    assert after == before
    assert [h[0].id for h in after] == ["d0#0", "d1#0", "d2#0"]
    second.close()


def test_edge_backends_on_one_root_share_open_shards(tmp_path: Path) -> None:
    """A shard's WAL admits one opener per process; two backends on one root must not collide."""
    (tmp_path / "sub").mkdir()
    a, b = EdgeBackend(tmp_path), EdgeBackend(tmp_path / "sub" / "..")
    build(a, "shared", ["x y", "z w"])
    assert b.exists("shared") and b.count("shared") == 2
    a.close()
    assert b.count("shared") == 2  # reopened on demand
    b.close()


def test_open_index_routes_locations(tmp_path: Path) -> None:
    edge = open_index(None, tmp_path)
    assert isinstance(edge, EdgeBackend) and edge.root == (tmp_path / "qdrant").resolve()
    assert isinstance(open_index("edge", tmp_path), EdgeBackend)
    memory = open_index(":memory:", tmp_path)
    assert isinstance(memory, ClientBackend)
    memory.close()
    with pytest.raises(InputError, match="unknown Qdrant location"):
        open_index("ftp://example", tmp_path)


def test_a_server_takes_its_api_key_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One place reads $QDRANT_API_KEY, for the CLI and studies alike; an explicit key wins."""
    import composer.index as index_module

    opened: list[tuple[str, str | None]] = []
    monkeypatch.setattr(index_module, "ClientBackend",
                        lambda location, api_key=None: opened.append((location, api_key)))
    monkeypatch.setenv("QDRANT_API_KEY", "from-the-env")
    open_index("https://qdrant.example:6333", tmp_path)
    open_index("https://qdrant.example:6333", tmp_path, api_key="explicit")
    open_index(":memory:", tmp_path)
    assert opened == [("https://qdrant.example:6333", "from-the-env"),
                      ("https://qdrant.example:6333", "explicit"), (":memory:", None)]


def test_edge_and_client_rank_identically(tmp_path: Path) -> None:
    """Same vectors, same BM25 stats: both backends must agree, so a study can move between them."""
    rng = np.random.default_rng(11)
    words = ["نهر", "جبل", "مدينة", "بحر", "صحراء", "غابة", "جزيرة", "وادي", "سهل", "بحيرة"]
    # Distinct lengths keep BM25 scores tie-free, so the branches hand the same ranks to fusion.
    texts = [" ".join(rng.choice(words, size=3 + i)) + f" رقم{i}" for i in range(80)]
    vecs = rng.standard_normal((80, 16)).astype(np.float32)
    queries = ["نهر بحر", "جبل جزيرة وادي", "صحراء", "رقم5 غابة"]
    dense_q = rng.standard_normal((len(queries), 16)).astype(np.float32)
    results = []
    for backend in (EdgeBackend(tmp_path), ClientBackend(":memory:")):
        encoder = build(backend, "same", texts, vecs)
        sparse_q = encoder.encode_queries(queries)
        runs = [
            named(backend.search_dense("same", dense_q, 8)),
            named(backend.search_bm25("same", sparse_q, 8)),
            named(backend.search_hybrid("same", dense_q, sparse_q, 8, fusion="rrf", prefetch=20)),
            named(backend.search_hybrid("same", dense_q, sparse_q, 8, fusion="dbsf", prefetch=20)),
        ]
        results.append([[[(h.id, round(h.score, 4)) for h in hits] for hits in run] for run in runs])
        backend.close()
    edge, client = results
    for mode, edge_run, client_run in zip(["dense", "bm25", "rrf", "dbsf"], edge, client, strict=True):
        for a, b in zip(edge_run, client_run, strict=True):
            assert [score for _, score in a] == [score for _, score in b], mode
            # Tied ids may swap or straddle the cut-off: they must agree above the last score.
            last = a[-1][1]
            assert {i for i, score in a if score > last} == {i for i, score in b if score > last}, mode


def test_scan_scores_every_point_exactly(make_backend: Factory) -> None:
    """What a collection is checked with before reuse: one dense query scoring all points, one sparse
    query scoring every point sharing a term with it."""
    index = make_backend()
    encoder, vecs = hybrid_fixture(index)
    probe = np.random.default_rng(8).standard_normal(24)
    (terms,) = encoder.encode_queries(["common zanzibar"])
    dense, sparse = index.scan("hy", probe, terms)
    assert dense is not None and len(dense) == 60
    expected = unit(vecs.astype(np.float64)) @ unit(probe)
    by_chunk = {CHUNK_OF[pid]: score for pid, score in dense}
    np.testing.assert_allclose([by_chunk[f"d{i}#0"] for i in range(60)], expected, atol=1e-6)
    assert sorted(sparse) == sorted(index.search_bm25("hy", [terms], 60)[0])
    assert len(sparse) == 60  # "common" is in every text
    bm25_only = build(index, "sparse", ["one two", "three four", "five"])
    found = index.scan("sparse", None, bm25_only.encode_queries(["two three"])[0])
    assert found[0] is None and {CHUNK_OF[pid] for pid, _ in found[1]} == {"d0#0", "d1#0"}
