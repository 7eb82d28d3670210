"""How well a judge agrees with human labels: small pure functions over paired label/verdict arrays.

Pass/fail labels are compared by accuracy and Cohen's kappa; 1-5 ratings by quadratic-weighted kappa and
Spearman's rho. Kappa is the headline: it discounts the agreement a judge gets by chance (a judge passing
everything agrees with 90% of labels when 90% pass, and scores kappa 0). Every figure comes with a seeded
percentile bootstrap CI over the labelled answers, so a kappa of 0.7 on 20 labels reads as what it is.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from scipy.stats import rankdata

Array = npt.NDArray[np.float64]
Pairs = Sequence[int] | npt.NDArray[np.int_]


def confusion(labels: Pairs, judged: Pairs, categories: Sequence[int]) -> npt.NDArray[np.int_]:
    """Counts: rows are the human labels, columns the judge's verdicts, both in ``categories`` order."""
    index = {c: i for i, c in enumerate(categories)}
    k = len(categories)
    codes = np.array([index[a] * k + index[b] for a, b in zip(labels, judged, strict=True)], dtype=np.int_)
    return np.bincount(codes, minlength=k * k).reshape(k, k)


def accuracy_of(matrix: Array) -> float:
    """Share of answers on the diagonal of a confusion matrix (NaN for an empty one)."""
    total = matrix.sum()
    return float(np.trace(matrix) / total) if total else float("nan")


def kappa_of(matrix: Array, *, quadratic: bool = False) -> float:
    """Cohen's kappa of a confusion matrix, quadratic-weighted for ordinal categories: 1 - observed /
    expected disagreement, the expected one from the two raters' marginals. NaN when chance agreement is
    total (both raters gave one and the same category: nothing to tell apart)."""
    k = matrix.shape[0]
    total = matrix.sum()
    if total == 0:
        return float("nan")
    i, j = np.indices((k, k))
    weights = ((i - j) / max(k - 1, 1)) ** 2 if quadratic else (i != j).astype(np.float64)
    observed = matrix / total
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0))
    chance = float((weights * expected).sum())
    if chance == 0:
        return float("nan")
    return 1.0 - float((weights * observed).sum()) / chance


def accuracy(labels: Pairs, judged: Pairs) -> float:
    """Share of answers where the judge's verdict is the label."""
    cats = sorted(set(labels) | set(judged))
    return accuracy_of(confusion(labels, judged, cats).astype(np.float64))


def cohen_kappa(
    labels: Pairs, judged: Pairs, *, categories: Sequence[int] | None = None, quadratic: bool = False
) -> float:
    """Cohen's kappa (quadratic-weighted with ``quadratic``: the distance between ratings counts)."""
    cats = list(categories) if categories is not None else sorted(set(labels) | set(judged))
    return kappa_of(confusion(labels, judged, cats).astype(np.float64), quadratic=quadratic)


def spearman(labels: Pairs, judged: Pairs) -> float:
    """Spearman's rank correlation (ties averaged); NaN when either side is constant."""
    return float(
        _spearman_rows(np.asarray([labels], dtype=np.float64), np.asarray([judged], dtype=np.float64))[0]
    )


def _spearman_rows(a: Array, b: Array) -> Array:
    """Spearman's rho of each row pair (rows of resamples at once)."""
    ra, rb = rankdata(a, axis=1), rankdata(b, axis=1)
    ra -= ra.mean(axis=1, keepdims=True)
    rb -= rb.mean(axis=1, keepdims=True)
    denom = np.sqrt((ra**2).sum(axis=1) * (rb**2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, (ra * rb).sum(axis=1) / np.where(denom > 0, denom, 1.0), np.nan)


def bootstrap_agreement(
    labels: Pairs,
    judged: Pairs,
    categories: Sequence[int],
    *,
    quadratic: bool = False,
    resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap CIs of accuracy, kappa and Spearman over resampled answers (NaN resamples,
    where kappa is undefined, are left out; an interval is NaN when every resample is)."""
    n = len(labels)
    a, b = np.asarray(labels, dtype=np.int_), np.asarray(judged, dtype=np.int_)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(resamples, n))
    k = len(categories)
    index = {c: i for i, c in enumerate(categories)}
    codes = np.array([index[x] * k + index[y] for x, y in zip(a, b, strict=True)], dtype=np.int_)
    offsets = (np.arange(resamples) * k * k)[:, None]
    matrices = (
        np.bincount((codes[draws] + offsets).ravel(), minlength=resamples * k * k)
        .reshape(resamples, k, k)
        .astype(np.float64)
    )
    values = {
        "accuracy": np.array([accuracy_of(m) for m in matrices]),
        "kappa": np.array([kappa_of(m, quadratic=quadratic) for m in matrices]),
        "spearman": _spearman_rows(a[draws].astype(np.float64), b[draws].astype(np.float64)),
    }
    tail = (1 - confidence) / 2 * 100
    out: dict[str, tuple[float, float]] = {}
    for name, column in values.items():
        finite = column[np.isfinite(column)]
        if finite.size == 0:
            out[name] = (float("nan"), float("nan"))
            continue
        low, high = np.percentile(finite, [tail, 100 - tail])
        out[name] = (float(low), float(high))
    return out


def terciles(lengths: Sequence[int]) -> list[int]:
    """Each answer's length tercile (0 short, 1 middle, 2 long), by rank so ties split evenly: a judge
    that favours long answers agrees less in one tercile than in the others."""
    n = len(lengths)
    if n == 0:
        return []
    order = np.argsort(np.asarray(lengths), kind="stable")
    out = [0] * n
    for rank, i in enumerate(order):
        out[int(i)] = min(2, rank * 3 // n)
    return out
