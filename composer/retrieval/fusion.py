"""Fusing ranked lists into one: RRF, DBSF and convex combination, as arrays over a batch of questions.

Hybrid search fuses a dense and a BM25 list per question; multi-query fuses one list per paraphrase.
Each list contributes a score per item (its normalized score, or 1/(k + position) for RRF), an item
missing from a list gets nothing from it, and the fused score is the (weighted) sum.

- ``rrf``: Σ 1/(k + position), position 0-based, as Qdrant's ``Fusion.Rrf(k)`` (qdrant/qdrant,
  lib/segment/src/common/reciprocal_rank_fusion.rs).
- ``dbsf``: Σ of scores normalized by (s - (μ - 3σ)) / 6σ with the sample σ, a one-item or zero-spread
  list scoring 0.5, as Qdrant's ``Fusion.Dbsf`` (lib/segment/src/common/score_fusion.rs).
- ``convex``: w · norm(dense) + (1 - w) · norm(BM25), AutoRAG's hybrid_cc (``weight`` is the dense
  side's share), with the normalizations ``minmax``, ``theoretical_minmax`` (the floor is the score's
  theoretical minimum: -1 for cosine, 0 for BM25), ``zscore`` and ``dbsf``. A degenerate list (one item,
  or equal scores) normalizes to 0.5 (zscore: 0), Qdrant's convention; AutoRAG's 0/0 gives 0 there.

Qdrant breaks equal fused scores arbitrarily; here they go by item id descending (trec_eval's order), so
a fusion is deterministic, and equal to Qdrant's up to that order (tests/retrieval/test_fusion.py: both).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

import numpy as np
import numpy.typing as npt

from composer.data.ranking import NONE, ChunkTable

Items = npt.NDArray[np.int64]
Scores = npt.NDArray[np.float64]
Normalization = Literal["minmax", "theoretical_minmax", "zscore", "dbsf"]
NORMALIZATIONS: tuple[str, ...] = get_args(Normalization)
FusionMethod = Literal["rrf", "dbsf", "convex"]
FUSIONS: tuple[str, ...] = get_args(FusionMethod)

THEORETICAL_MIN = {"dense": -1.0, "bm25": 0.0}
"""The least score each branch can give: cosine similarity, and a BM25 sum of non-negative terms."""


def rrf_scores(items: Items, k: int) -> Scores:
    """Each item's reciprocal-rank contribution 1/(k + position), position 0-based; 0 on padding."""
    positions = np.arange(items.shape[1], dtype=np.float64)
    return np.where(items == NONE, 0.0, 1.0 / (k + positions))


def normalize(items: Items, scores: Scores, method: Normalization, floor: float = 0.0) -> Scores:
    """Scores normalized row by row over each row's own items (padding stays 0); ``floor`` is the
    theoretical minimum for ``theoretical_minmax``."""
    valid = items != NONE
    count = valid.sum(axis=1, keepdims=True)
    masked = np.where(valid, scores, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        if method in ("minmax", "theoretical_minmax"):
            top = np.nanmax(np.where(valid, scores, -np.inf), axis=1, keepdims=True)
            low = (
                np.nanmin(np.where(valid, scores, np.inf), axis=1, keepdims=True)
                if method == "minmax"
                else np.full_like(top, floor)
            )
            out = np.where(top > low, (scores - low) / (top - low), 0.5)
        else:
            mean = np.nansum(masked, axis=1, keepdims=True) / np.maximum(count, 1)
            var = np.nansum((masked - mean) ** 2, axis=1, keepdims=True) / np.maximum(count - 1, 1)
            std = np.sqrt(var)
            spread = (count > 1) & (std > 0)
            if method == "zscore":
                out = np.where(spread, (scores - mean) / std, 0.0)
            else:  # dbsf: mean ± 3 sample standard deviations onto [0, 1], unclamped, as Qdrant
                out = np.where(spread, (scores - (mean - 3 * std)) / (6 * std), 0.5)
    return np.where(valid, out, 0.0)


def combine(lists: Sequence[tuple[Items, Scores]], table: ChunkTable, limit: int) -> tuple[Items, Scores]:
    """Per row, the sum of each item's contributions over ``lists`` (items, contribution), the best
    ``limit`` items in trec order. Rows are questions; every list has one row per question."""
    n = len(lists[0][0])
    items = np.concatenate([i for i, _ in lists], axis=1)
    contrib = np.concatenate([c for _, c in lists], axis=1)
    rows = np.broadcast_to(np.arange(n)[:, None], items.shape)
    valid = items != NONE
    width = len(table) + 1
    codes, inverse = np.unique(rows[valid] * width + items[valid], return_inverse=True)
    fused = np.bincount(inverse, weights=contrib[valid], minlength=len(codes))
    row_of, item_of = codes // width, codes % width
    # Best first within each row: score descending, then id descending (trec order), then cut at limit.
    order = np.lexsort((-table.id_order[item_of], -fused, row_of))
    row_of, item_of, fused = row_of[order], item_of[order], fused[order]
    starts = np.searchsorted(row_of, np.arange(n))
    rank = np.arange(len(row_of)) - starts[row_of]
    keep = rank < limit
    depth = min(limit, int(rank.max()) + 1) if rank.size else 0
    out_items = np.full((n, depth), NONE, dtype=np.int64)
    out_scores = np.zeros((n, depth), dtype=np.float64)
    out_items[row_of[keep], rank[keep]] = item_of[keep]
    out_scores[row_of[keep], rank[keep]] = fused[keep]
    return out_items, out_scores


def fuse_hybrid(
    dense: tuple[Items, Scores],
    bm25: tuple[Items, Scores],
    table: ChunkTable,
    *,
    method: FusionMethod,
    limit: int,
    rrf_k: int = 60,
    normalization: Normalization = "minmax",
    weight: float = 0.5,
) -> tuple[Items, Scores]:
    """The dense and BM25 lists of each question (each already cut at its prefetch) fused into the best
    ``limit``."""
    (d_items, d_scores), (s_items, s_scores) = dense, bm25
    if method == "rrf":
        lists = [(d_items, rrf_scores(d_items, rrf_k)), (s_items, rrf_scores(s_items, rrf_k))]
    elif method == "dbsf":
        lists = [
            (d_items, normalize(d_items, d_scores, "dbsf")),
            (s_items, normalize(s_items, s_scores, "dbsf")),
        ]
    elif method == "convex":
        lists = [
            (d_items, weight * normalize(d_items, d_scores, normalization, THEORETICAL_MIN["dense"])),
            (s_items, (1.0 - weight) * normalize(s_items, s_scores, normalization, THEORETICAL_MIN["bm25"])),
        ]
    else:
        raise ValueError(f"unknown fusion {method!r}; expected one of {list(FUSIONS)}")
    return combine(lists, table, limit)


def fuse_rrf(
    rankings: Sequence[tuple[Items, Scores]], table: ChunkTable, *, k: int, limit: int
) -> tuple[Items, Scores]:
    """Reciprocal rank fusion of several rankings of the same questions (multi-query expansion)."""
    return combine([(items, rrf_scores(items, k)) for items, _ in rankings], table, limit)
