"""Means with uncertainty: percentile bootstrap CIs, seeded so a report is reproducible to the digit."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import numpy.typing as npt

Values = Sequence[float] | npt.NDArray[np.floating]

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
    values: Values, *, confidence: float = 0.95, resamples: int = 1000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean."""
    array = _array(values)
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    means = _resample_counts(array.size, resamples, seed) @ array / array.size
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


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


def paired_bootstrap_ci(
    a: Values, b: Values, *, confidence: float = 0.95, resamples: int = 1000, seed: int = 0
) -> tuple[float, float]:
    """CI of mean(a - b) over paired per-question values: does the winner really beat the runner-up?

    Resampling questions, not each system separately, removes the between-question variance both share.
    """
    first, second = _array(a), _array(b)
    if first.shape != second.shape:
        raise ValueError(f"paired values need equal lengths, got {first.size} and {second.size}")
    return bootstrap_ci(first - second, confidence=confidence, resamples=resamples, seed=seed)
