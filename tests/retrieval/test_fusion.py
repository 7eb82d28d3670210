"""Fusion of ranked lists: the arithmetic of RRF, DBSF and the convex combination (AutoRAG's hybrid_cc) on
hand-computed cases, and equality with Qdrant's own server-side fusion where Qdrant has one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from composer.chunking import Chunk
from composer.data.ranking import NONE, ChunkTable
from composer.index import Bm25Encoder, ClientBackend, EdgeBackend, VectorIndex
from composer.index.base import point_id
from composer.retrieval.fusion import NORMALIZATIONS, fuse_hybrid, fuse_rrf, normalize, rrf_scores

TABLE = ChunkTable(tuple(f"c{i}" for i in range(6)), tuple(f"d{i}" for i in range(6)), ("",) * 6)


def rows(*lists: list[tuple[int, float]]) -> tuple[np.ndarray, np.ndarray]:
    """Ranked (position, score) lists as padded item and score rows."""
    width = max(len(x) for x in lists)
    items = np.full((len(lists), width), NONE, dtype=np.int64)
    scores = np.zeros((len(lists), width))
    for r, hits in enumerate(lists):
        items[r, : len(hits)] = [i for i, _ in hits]
        scores[r, : len(hits)] = [s for _, s in hits]
    return items, scores


def fused(result: tuple[np.ndarray, np.ndarray], row: int = 0) -> list[tuple[str, float]]:
    items, scores = result
    return [
        (TABLE.ids[i], s) for i, s in zip(items[row].tolist(), scores[row].tolist(), strict=True) if i != NONE
    ]


def assert_fused(got: list[tuple[str, float]], expected: list[tuple[str, float]]) -> None:
    assert [i for i, _ in got] == [i for i, _ in expected]
    assert [s for _, s in got] == pytest.approx([s for _, s in expected])


def test_rrf_position_is_zero_based_like_qdrant() -> None:
    items, _ = rows([(0, 9.0), (1, 5.0)], [(2, 1.0)])
    assert rrf_scores(items, 60).tolist() == [[1 / 60, 1 / 61], [1 / 60, 0.0]]


def test_rrf_sums_over_lists_and_breaks_ties_by_id_descending() -> None:
    dense = rows([(0, 0.9), (1, 0.8), (2, 0.7)])
    bm25 = rows([(1, 12.0), (3, 11.0)])
    out = fused(fuse_hybrid(dense, bm25, TABLE, method="rrf", rrf_k=10, limit=10))
    assert_fused(out, [("c1", 1 / 11 + 1 / 10), ("c0", 1 / 10), ("c3", 1 / 11), ("c2", 1 / 12)])
    # Equal contributions (each first in one list) tie: the higher id goes first.
    tie = fused(fuse_hybrid(rows([(0, 0.9)]), rows([(3, 5.0)]), TABLE, method="rrf", rrf_k=10, limit=10))
    assert [i for i, _ in tie] == ["c3", "c0"]


def test_dbsf_normalizes_each_list_by_mean_and_three_sample_deviations() -> None:
    items, scores = rows([(0, 8.0), (1, 7.0), (2, 6.0)])  # mean 7, sample std 1: [4, 10] onto [0, 1]
    assert normalize(items, scores, "dbsf").tolist()[0] == pytest.approx([4 / 6, 3 / 6, 2 / 6])
    one, alone = rows([(0, 3.0)])  # one item, or no spread: 0.5, as Qdrant
    assert normalize(one, alone, "dbsf").tolist() == [[0.5]]
    same, flat = rows([(0, 2.0), (1, 2.0)])
    assert normalize(same, flat, "dbsf").tolist() == [[0.5, 0.5]]
    # A point missing from a list gets nothing from it; the sum is unclamped.
    out = fused(
        fuse_hybrid(rows([(0, 8.0), (1, 7.0), (2, 6.0)]), rows([(2, 1.0)]), TABLE, method="dbsf", limit=5)
    )
    assert_fused(out, [("c2", 2 / 6 + 0.5), ("c0", 4 / 6), ("c1", 3 / 6)])


@pytest.mark.parametrize("method", NORMALIZATIONS)
def test_normalizations_follow_their_formulas(method: str) -> None:
    values = np.array([0.8, 0.6, -0.2])
    items, scores = rows([(0, 0.8), (1, 0.6), (2, -0.2)])
    out = normalize(items, scores, method, floor=-1.0)[0].tolist()  # type: ignore[arg-type]
    mean, std = values.mean(), values.std(ddof=1)  # the sample deviation, as Qdrant's DBSF
    reference = {
        "minmax": [1.0, 0.8, 0.0],
        "theoretical_minmax": ((values + 1) / 1.8).tolist(),  # floor: the least possible score, cosine's -1
        "zscore": ((values - mean) / std).tolist(),
        "dbsf": ((values - (mean - 3 * std)) / (6 * std)).tolist(),
    }[method]
    assert out == pytest.approx(reference)
    one, alone = rows([(0, 3.0)])
    assert normalize(one, alone, method, floor=0.0).tolist() == [[0.0 if method == "zscore" else 0.5]] or (
        method == "theoretical_minmax"
    )  # 3 above the floor 0 is the list's top: 1.0


def test_convex_weight_is_the_dense_share() -> None:
    dense = rows([(0, 0.9), (1, 0.5), (2, 0.1)])
    bm25 = rows([(2, 20.0), (1, 10.0), (0, 0.0)])
    only_dense = fused(
        fuse_hybrid(dense, bm25, TABLE, method="convex", normalization="minmax", weight=1.0, limit=3)
    )
    only_bm25 = fused(
        fuse_hybrid(dense, bm25, TABLE, method="convex", normalization="minmax", weight=0.0, limit=3)
    )
    assert [i for i, _ in only_dense] == ["c0", "c1", "c2"]
    assert [i for i, _ in only_bm25] == ["c2", "c1", "c0"]
    half = fused(
        fuse_hybrid(dense, bm25, TABLE, method="convex", normalization="minmax", weight=0.25, limit=3)
    )
    # c2: 0.25 * 0 + 0.75 * 1; c1: 0.25 * 0.5 + 0.75 * 0.5; c0: 0.25 * 1 + 0.75 * 0
    assert_fused(half, [("c2", 0.75), ("c1", 0.5), ("c0", 0.25)])


def test_convex_gives_a_missing_item_nothing_from_that_side() -> None:
    dense = rows([(0, 0.9), (1, 0.1)])
    bm25 = rows([(2, 7.0), (0, 3.0)])
    out = dict(
        fused(
            fuse_hybrid(
                dense, bm25, TABLE, method="convex", normalization="theoretical_minmax", weight=0.5, limit=5
            )
        )
    )
    assert out["c2"] == pytest.approx(0.5 * 1.0)  # in BM25 only
    assert out["c1"] == pytest.approx(0.5 * (0.1 + 1) / (0.9 + 1))  # in dense only
    assert out["c0"] == pytest.approx(0.5 * 1.0 + 0.5 * 3.0 / 7.0)


def test_rows_fuse_independently_and_limit_cuts_each() -> None:
    dense = rows([(0, 0.9), (1, 0.8)], [(4, 0.3)], [])
    bm25 = rows([(1, 5.0)], [(5, 2.0), (4, 1.0)], [(3, 1.0)])
    items, scores = fuse_hybrid(dense, bm25, TABLE, method="rrf", rrf_k=1, limit=1)
    assert items.tolist() == [[1], [4], [3]]
    assert scores[:, 0].tolist() == pytest.approx([1 / 2 + 1 / 1, 1 / 1 + 1 / 2, 1.0])


def test_multi_query_rrf_over_several_rankings() -> None:
    first, second, third = rows([(0, 1.0), (1, 1.0)]), rows([(1, 1.0)]), rows([(2, 1.0), (0, 1.0)])
    out = fused(fuse_rrf([first, second, third], TABLE, k=60, limit=10))
    # c0 and c1 tie at 1/60 + 1/61: the higher id first.
    assert [i for i, _ in out] == ["c1", "c0", "c2"]
    assert [s for _, s in out] == pytest.approx([1 / 61 + 1 / 60, 1 / 60 + 1 / 61, 1 / 60])


# -- equal to Qdrant's server-side fusion --------------------------------------------------------------


def tie_groups(hits: list[tuple[int, float]], above: float) -> list[set[int]]:
    """The items above ``above`` grouped by equal score (within float error), best group first."""
    groups: list[tuple[float, set[int]]] = []
    for item, score in hits:
        if score <= above + 1e-6:
            break
        if groups and abs(groups[-1][0] - score) < 1e-6:
            groups[-1][1].add(item)
        else:
            groups.append((score, {item}))
    return [g for _, g in groups]


@pytest.fixture(params=["edge", "memory"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorIndex]:
    index: VectorIndex = (
        EdgeBackend(tmp_path / "qdrant") if request.param == "edge" else ClientBackend(":memory:")
    )
    yield index
    index.close()


@pytest.mark.parametrize("fusion", ["rrf", "dbsf"])
def test_fusion_of_cached_branch_lists_equals_qdrants(backend: VectorIndex, fusion: str) -> None:
    """The same branch lists fused here and by Qdrant (prefetch + Fusion): the same items with the same
    scores; only the order of equal scores may differ (Qdrant breaks ties arbitrarily)."""
    rng = np.random.default_rng(5)
    words = ["نهر", "جبل", "مدينة", "بحر", "صحراء", "غابة", "جزيرة", "وادي", "سهل", "بحيرة", "river", "sea"]
    texts = [" ".join(rng.choice(words, size=rng.integers(3, 12))) + f" n{i}" for i in range(300)]
    vectors = rng.standard_normal((300, 24)).astype(np.float32)
    chunks = [Chunk(f"c{i}#0", f"c{i}", t, 0, len(t), 0) for i, t in enumerate(texts)]
    table = ChunkTable(tuple(c.id for c in chunks), tuple(c.doc_id for c in chunks), tuple(texts))
    position = {point_id(c.id): i for i, c in enumerate(chunks)}
    encoder, sparse = Bm25Encoder.fit(texts)
    backend.create("fuse", 24, {"bm25": encoder.to_dict()})
    backend.upsert("fuse", chunks, vectors, sparse)
    backend.finish("fuse")
    queries = ["نهر بحر", "جبل جزيرة وادي", "صحراء river", "sea n5 غابة", "بحيرة سهل"]
    dense_q = rng.standard_normal((len(queries), 24)).astype(np.float32)
    sparse_q = encoder.encode_queries(queries)
    prefetch, k = 20, 10

    def branch(found: list[list[tuple[str, float]]]) -> tuple[np.ndarray, np.ndarray]:
        return rows(*[[(position[pid], s) for pid, s in hits] for hits in found])

    dense = branch(backend.search_dense("fuse", dense_q, prefetch))
    bm25 = branch(backend.search_bm25("fuse", sparse_q, prefetch))
    ours_items, ours_scores = fuse_hybrid(
        dense,
        bm25,
        table,
        method=fusion,
        limit=k,  # type: ignore[arg-type]
        rrf_k=60,
    )
    qdrant = backend.search_hybrid(
        "fuse",
        dense_q,
        sparse_q,
        k,
        fusion=fusion,  # type: ignore[arg-type]
        prefetch=prefetch,
        rrf_k=60,
    )
    for row, hits in enumerate(qdrant):
        theirs = [(position[pid], s) for pid, s in hits]
        mine = [
            (i, s)
            for i, s in zip(ours_items[row].tolist(), ours_scores[row].tolist(), strict=True)
            if i != NONE
        ]
        assert len(mine) == len(theirs)
        np.testing.assert_allclose([s for _, s in mine], [s for _, s in theirs], rtol=1e-5, atol=1e-6)
        # Equal up to the order of ties, and up to which tied item makes the cut at k.
        last = theirs[-1][1]
        assert {i for i, s in mine if s > last + 1e-6} == {i for i, s in theirs if s > last + 1e-6}
        assert tie_groups(mine, last) == tie_groups(theirs, last)


@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_every_convex_normalization_ranks_by_its_scores(normalization: str) -> None:
    rng = np.random.default_rng(9)
    dense = rows([(i, float(s)) for i, s in zip(range(6), sorted(rng.random(6), reverse=True), strict=True)])
    bm25 = rows([(i, float(s)) for i, s in zip([5, 3, 1], [9.0, 4.0, 2.0], strict=True)])
    items, scores = fuse_hybrid(
        dense, bm25, TABLE, method="convex", weight=0.3, limit=6, normalization=normalization
    )  # type: ignore[arg-type]
    assert sorted(items[0].tolist()) == list(range(6))
    assert all(a >= b for a, b in zip(scores[0], scores[0][1:], strict=False))
