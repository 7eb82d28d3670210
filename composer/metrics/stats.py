"""Means with uncertainty: percentile bootstrap CIs, seeded so a report is reproducible to the digit.

A conversation's turns are not independent (a retriever that misses its topic misses every follow-up), so
every function takes ``groups``: one key per value (its conversation), and a resample then draws whole
groups (a cluster bootstrap). When every value is its own group the draws are today's, to the digit.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

Values = Sequence[float] | npt.NDArray[np.floating]
Groups = Sequence[Hashable] | npt.NDArray[Any] | None
"""Each value's group (its conversation), drawn whole by a resample; None: each value its own group."""

_MAX_CELLS = 4_000_000
"""Resampled values drawn at once: bounds memory for large question sets while staying vectorized."""


def _array(values: Values) -> npt.NDArray[np.float64]:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or array.size == 0:
        raise ValueError("need a non-empty 1-D sequence of values")
    return array


def mean(values: Values) -> float:
    return float(_array(values).mean())


def std(values: Values) -> float:
    """Sample standard deviation (ddof=1), 0.0 for a single value."""
    array = _array(values)
    return float(array.std(ddof=1)) if array.size > 1 else 0.0


def bootstrap_ci(
    values: Values, *, groups: Groups = None, confidence: float = 0.95, resamples: int = 1000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean; with ``groups``, each resample draws whole
    groups and takes the mean of the values drawn (a cluster bootstrap)."""
    codes = _codes(groups, _array(values).size)
    if codes is None:
        return bootstrap_cis([values], confidence=confidence, resamples=resamples, seed=seed)[0]
    tail = _tail(confidence, resamples)
    means = scored_means({"": values}, groups=groups, resamples=resamples, seed=seed)[""]
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def bootstrap_cis(
    columns: Sequence[Values], *, confidence: float = 0.95, resamples: int = 1000, seed: int = 0
) -> list[tuple[float, float]]:
    """``bootstrap_ci`` of each column, the columns of one length resampled in one matrix product: a
    report's 24 metrics read the 11 MB resample matrix once, not 24 times."""
    arrays = [_array(values) for values in columns]
    tail = _tail(confidence, resamples)
    out: list[tuple[float, float]] = [(0.0, 0.0)] * len(arrays)
    for size in {a.size for a in arrays}:
        at = [i for i, a in enumerate(arrays) if a.size == size]
        means = _resample_counts(size, resamples, seed) @ np.column_stack([arrays[i] for i in at]) / size
        lows, highs = np.percentile(means, [tail, 100 - tail], axis=0)
        for i, low, high in zip(at, lows.tolist(), highs.tolist(), strict=True):
            out[i] = (low, high)
    return out


@lru_cache(maxsize=4)
def _resample_counts(n: int, resamples: int, seed: int) -> npt.NDArray[np.float64]:
    """How often each of ``n`` values is drawn in each resample (one row per resample): drawn once per
    question-set size and seed, so a report's every metric (and every trial's) shares it, and a mean of a
    resample is one matrix product."""
    rng = np.random.default_rng(seed)
    counts = np.zeros((resamples, n), dtype=np.float64)
    rows = max(1, _MAX_CELLS // n)
    for start in range(0, resamples, rows):
        draws = rng.integers(0, n, size=(min(rows, resamples - start), n))
        for offset, row in enumerate(draws):
            counts[start + offset] = np.bincount(row, minlength=n)
    return counts


def _tail(confidence: float, resamples: int) -> float:
    """The percentile below the interval (2.5 for 95%), the arguments checked."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    return (1 - confidence) / 2 * 100


def _codes(groups: Groups, n: int) -> tuple[npt.NDArray[np.intp], int] | None:
    """Each value's group as an index (groups numbered in first-seen order) and the number of groups;
    None when there are no groups or every value is its own: then the draws are the plain bootstrap's."""
    if groups is None:
        return None
    if len(groups) != n:
        raise ValueError(f"need one group per value, got {len(groups)} groups for {n} values")
    numbers: dict[Hashable, int] = {}
    codes = np.fromiter((numbers.setdefault(g, len(numbers)) for g in groups), dtype=np.intp, count=n)
    return None if len(numbers) == n else (codes, len(numbers))


def paired_bootstrap_ci(
    a: Values,
    b: Values,
    *,
    groups: Groups = None,
    confidence: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
) -> tuple[float, float]:
    """CI of mean(a - b) over paired per-question values: does the winner really beat the runner-up?

    Resampling questions (with ``groups``: conversations), not each system separately, removes the
    between-question variance both share.
    """
    first, second = _array(a), _array(b)
    if first.shape != second.shape:
        raise ValueError(f"paired values need equal lengths, got {first.size} and {second.size}")
    return bootstrap_ci(first - second, groups=groups, confidence=confidence, resamples=resamples, seed=seed)


Columns = Mapping[str, Values]
"""Per-question values of several metrics (one row per question, NaN where a question was not scored)."""
Statistic = Callable[[Mapping[str, npt.NDArray[np.float64]]], npt.NDArray[np.float64]]
"""Metric means (one array per metric, one value per resample) -> one value per resample."""


def scored_means(
    columns: Columns, *, groups: Groups = None, resamples: int = 1000, seed: int = 0
) -> dict[str, npt.NDArray[np.float64]]:
    """Each metric's mean over the scored (non-NaN) questions of each bootstrap resample of the rows;
    NaN for a resample that drew none of them. Every column is resampled with the same questions, or with
    ``groups`` the same whole groups (a group's sums drawn at once: a resample is one product over groups)."""
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    arrays = {name: np.asarray(values, dtype=np.float64) for name, values in columns.items()}
    sizes = {a.size for a in arrays.values()}
    if len(sizes) != 1 or 0 in sizes or any(a.ndim != 1 for a in arrays.values()):
        raise ValueError(f"need non-empty 1-D columns of one length, got lengths {sorted(sizes)}")
    n = sizes.pop()
    coded = _codes(groups, n)
    counts = _resample_counts(n if coded is None else coded[1], resamples, seed)

    def by_group(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        if coded is None:
            return values
        return np.bincount(coded[0], weights=values, minlength=coded[1]).astype(np.float64, copy=False)

    out: dict[str, npt.NDArray[np.float64]] = {}
    for name, values in arrays.items():
        scored = ~np.isnan(values)
        drawn = counts @ by_group(scored.astype(np.float64))
        totals = counts @ by_group(np.where(scored, values, 0.0))
        out[name] = np.divide(totals, drawn, out=np.full(resamples, np.nan), where=drawn > 0)
    return out


def paired_statistic_ci(
    a: Columns,
    b: Columns,
    statistic: Statistic,
    *,
    groups: Groups = None,
    confidence: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile CI of ``statistic(means of a) - statistic(means of b)``, ``a`` and ``b`` being the same
    questions (rows) scored by two systems: each resample draws the same questions (with ``groups``, the
    same conversations) for both, and the statistic reads each metric's mean over the drawn questions that
    scored it, exactly as it reads the full set's means. So the interval is around the difference of the
    two systems' own scores."""
    tail = _tail(confidence, resamples)
    paired = {**{f"a:{k}": v for k, v in a.items()}, **{f"b:{k}": v for k, v in b.items()}}
    means = scored_means(paired, groups=groups, resamples=resamples, seed=seed)
    first = statistic({k: means[f"a:{k}"] for k in a})
    second = statistic({k: means[f"b:{k}"] for k in b})
    low, high = np.percentile(first - second, [tail, 100 - tail])
    return float(low), float(high)
