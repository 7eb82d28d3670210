"""Retrieval metrics on hand-computed rankings, as the batch functions see them: one row per question."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

import numpy as np
import pytest

from composer.metrics.retrieval import (
    RETRIEVAL_METRICS,
    hit_rate,
    metric_key,
    mrr,
    ndcg,
    precision,
    recall,
    relevance,
)

RANKED = ["a", "b", "c", "d"]
RELEVANT = {"b", "d", "x"}  # "x" was never retrieved


def one(fn: object, ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    matrix, counts = relevance([ranked], [relevant])
    return float(fn(matrix, counts, k)[0])  # type: ignore[operator]


def test_hit_rate_needs_a_relevant_item_within_k() -> None:
    assert one(hit_rate, RANKED, RELEVANT, 1) == 0.0
    assert one(hit_rate, RANKED, RELEVANT, 2) == 1.0
    assert one(hit_rate, RANKED, RELEVANT, 10) == 1.0


def test_recall_divides_by_all_relevant_items() -> None:
    assert one(recall, RANKED, RELEVANT, 1) == 0.0
    assert one(recall, RANKED, RELEVANT, 2) == pytest.approx(1 / 3)
    assert one(recall, RANKED, RELEVANT, 4) == pytest.approx(2 / 3)
    assert one(recall, RANKED, RELEVANT, 100) == pytest.approx(2 / 3)


def test_precision_divides_by_k_even_past_the_end_of_the_list() -> None:
    assert one(precision, RANKED, RELEVANT, 2) == 0.5
    assert one(precision, RANKED, RELEVANT, 4) == 0.5
    assert one(precision, RANKED, RELEVANT, 10) == 0.2


def test_mrr_is_cut_at_k() -> None:
    assert one(mrr, RANKED, RELEVANT, 1) == 0.0
    assert one(mrr, RANKED, RELEVANT, 2) == 0.5
    assert one(mrr, ["x", "a"], RELEVANT, 5) == 1.0


def test_ndcg_binary_gain_with_ideal_from_min_k_and_relevant() -> None:
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    ideal = 1 + 1 / math.log2(3) + 1 / math.log2(4)  # three relevant items fill ranks 1-3
    assert one(ndcg, RANKED, RELEVANT, 4) == pytest.approx(dcg / ideal)
    assert one(ndcg, RANKED, RELEVANT, 10) == pytest.approx(dcg / ideal)
    ideal_at_2 = 1 + 1 / math.log2(3)
    assert one(ndcg, RANKED, RELEVANT, 2) == pytest.approx((1 / math.log2(3)) / ideal_at_2)


def test_ndcg_is_one_for_a_perfect_ranking_shorter_than_k() -> None:
    assert one(ndcg, ["b", "d", "x"], RELEVANT, 10) == pytest.approx(1.0)
    assert one(ndcg, ["a"], {"a"}, 10) == 1.0


@pytest.mark.parametrize("name", list(RETRIEVAL_METRICS))
def test_nothing_relevant_retrieved_scores_zero(name: str) -> None:
    fn = RETRIEVAL_METRICS[name]
    assert one(fn, ["p", "q", "r"], {"z"}, 3) == 0.0
    assert one(fn, [], {"z"}, 3) == 0.0
    assert one(fn, ["p"], set(), 3) == 0.0


@pytest.mark.parametrize("name", list(RETRIEVAL_METRICS))
def test_cutoff_must_be_positive(name: str) -> None:
    with pytest.raises(ValueError, match="k must be >= 1"):
        one(RETRIEVAL_METRICS[name], RANKED, RELEVANT, 0)


@pytest.mark.parametrize("name", list(RETRIEVAL_METRICS))
def test_a_batch_scores_each_row_as_it_would_alone(name: str) -> None:
    """Rows of different lengths and relevant sets: the batch equals the questions one by one."""
    rankings = [RANKED, ["x", "a"], [], ["d", "b", "x", "q", "r", "s"], ["p"]]
    relevant: list[Collection[str]] = [RELEVANT, RELEVANT, {"a"}, RELEVANT, set()]
    matrix, counts = relevance(rankings, relevant)
    fn = RETRIEVAL_METRICS[name]
    for k in (1, 3, 5, 10):
        batch = fn(matrix, counts, k)
        assert batch.shape == (5,) and batch.dtype == np.float64
        assert batch.tolist() == [one(fn, r, rel, k) for r, rel in zip(rankings, relevant, strict=True)]


def test_metric_registry_order_and_keys() -> None:
    assert list(RETRIEVAL_METRICS) == ["hit_rate", "recall", "precision", "mrr", "ndcg"]
    assert RETRIEVAL_METRICS["ndcg"] is ndcg
    assert metric_key("recall", 10) == "recall@10"
    assert metric_key("hit_rate", 1) == "hit_rate@1"
