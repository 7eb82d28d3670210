"""Ranking metrics at a cutoff k, as pure functions over one question's judged ranking.

Conventions follow trec_eval and ranx exactly (parity-tested in tests/test_parity.py): binary relevance,
precision divides by k even when fewer items were returned, DCG discounts rank r by 1/log2(r + 1), and the
ideal DCG ranks min(k, |relevant|) relevant items first. ``ranked`` holds distinct keys in rank order (see
``composer.metrics.matching.judge``); an empty ``relevant`` scores 0.0 everywhere, as in ranx.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence

RetrievalMetric = Callable[[Sequence[str], Collection[str], int], float]


def _top(ranked: Sequence[str], k: int) -> Sequence[str]:
    if k < 1:
        raise ValueError(f"cutoff k must be >= 1, got {k}")
    return ranked[:k]


def _found(ranked: Sequence[str], relevant: Collection[str], k: int) -> int:
    return sum(1 for key in _top(ranked, k) if key in relevant)


def hit_rate(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """1.0 when any relevant item is in the top k (trec_eval's success_k)."""
    return 1.0 if _found(ranked, relevant, k) else 0.0


def recall(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Share of the relevant items found in the top k."""
    found = _found(ranked, relevant, k)
    return found / len(relevant) if relevant else 0.0


def precision(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Relevant items in the top k divided by k, not by how many were returned (trec_eval's P_k)."""
    return _found(ranked, relevant, k) / k


def mrr(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Reciprocal rank of the first relevant item within the top k, else 0."""
    for rank, key in enumerate(_top(ranked, k), start=1):
        if key in relevant:
            return 1.0 / rank
    return 0.0


def ndcg(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Binary-gain nDCG@k (trec_eval's ndcg_cut_k, ranx's ndcg@k)."""
    top = _top(ranked, k)
    dcg = sum(1.0 / math.log2(rank + 1) for rank, key in enumerate(top, start=1) if key in relevant)
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(k, len(relevant)) + 1))
    return dcg / ideal if ideal else 0.0


RETRIEVAL_METRICS: dict[str, RetrievalMetric] = {
    "hit_rate": hit_rate,
    "recall": recall,
    "precision": precision,
    "mrr": mrr,
    "ndcg": ndcg,
}


def metric_key(name: str, k: int) -> str:
    """The name reports and JSON use for a metric at a cutoff, e.g. ``recall@10``."""
    return f"{name}@{k}"
