"""Ranking metrics at a cutoff k, as pure functions over a batch of judged rankings.

A batch is a boolean relevance matrix ``relevant`` (one row per question, one column per rank: is the item
at that rank relevant) and ``n_relevant``, the size of each question's relevant set; every metric returns
one value per question. One row is one question, so a study's 1,395 questions are scored in a few array
operations rather than 28,000 function calls. Conventions follow trec_eval and ranx exactly
(parity-tested: tests/metrics/test_parity.py): binary relevance, precision divides by k even when fewer items
were returned, DCG discounts rank r by 1/log2(r + 1), and the ideal DCG ranks min(k, |relevant|) relevant
items first. An empty relevant set scores 0.0 everywhere, as in ranx.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import numpy as np
import numpy.typing as npt

Relevance = npt.NDArray[np.bool_]
"""(questions, ranks): True where the item at that rank is relevant; rows padded with False."""
Counts = npt.NDArray[np.int64]
Values = npt.NDArray[np.float64]
RetrievalMetric = Callable[[Relevance, Counts, int], Values]


def _top(relevant: Relevance, k: int) -> Relevance:
    if k < 1:
        raise ValueError(f"cutoff k must be >= 1, got {k}")
    return relevant[:, :k]


def _found(relevant: Relevance, k: int) -> Counts:
    return _top(relevant, k).sum(axis=1)


def hit_rate(relevant: Relevance, n_relevant: Counts, k: int) -> Values:
    """1.0 when any relevant item is in the top k (trec_eval's success_k)."""
    return (_found(relevant, k) > 0).astype(np.float64)


def recall(relevant: Relevance, n_relevant: Counts, k: int) -> Values:
    """Share of the relevant items found in the top k."""
    found = _found(relevant, k).astype(np.float64)
    return np.divide(found, n_relevant, out=np.zeros_like(found), where=n_relevant > 0)


def precision(relevant: Relevance, n_relevant: Counts, k: int) -> Values:
    """Relevant items in the top k divided by k, not by how many were returned (trec_eval's P_k)."""
    return _found(relevant, k) / k


def mrr(relevant: Relevance, n_relevant: Counts, k: int) -> Values:
    """Reciprocal rank of the first relevant item within the top k, else 0."""
    top = _top(relevant, k)
    if top.shape[1] == 0:
        return np.zeros(len(top))
    first = top.argmax(axis=1)
    return np.where(top.any(axis=1), 1.0 / (first + 1.0), 0.0)


def ndcg(relevant: Relevance, n_relevant: Counts, k: int) -> Values:
    """Binary-gain nDCG@k (trec_eval's ndcg_cut_k, ranx's ndcg@k)."""
    top = _top(relevant, k)
    discount = 1.0 / np.log2(np.arange(2, k + 2, dtype=np.float64))
    dcg = (top * discount[: top.shape[1]]).sum(axis=1)
    ideal_at = np.concatenate([[0.0], np.cumsum(discount)])  # ideal DCG of 0..k relevant items
    ideal = ideal_at[np.minimum(n_relevant, k)]
    return np.divide(dcg, ideal, out=np.zeros_like(dcg), where=ideal > 0)


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


def relevance(
    rankings: Sequence[Sequence[str]], relevant: Sequence[Collection[str]]
) -> tuple[Relevance, Counts]:
    """The matrix form of rankings of keys (distinct keys in rank order) and each one's relevant set."""
    depth = max((len(r) for r in rankings), default=0)
    matrix = np.zeros((len(rankings), depth), dtype=bool)
    for row, (ranked, rel) in enumerate(zip(rankings, relevant, strict=True)):
        matrix[row, : len(ranked)] = [key in rel for key in ranked]
    return matrix, np.array([len(rel) for rel in relevant], dtype=np.int64)
