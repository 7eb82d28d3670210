"""Means, standard deviations and seeded bootstrap confidence intervals."""

from __future__ import annotations

import numpy as np
import pytest

from composer.metrics import stats
from composer.metrics.stats import bootstrap_ci, mean, paired_bootstrap_ci, std


def test_mean_and_sample_std() -> None:
    assert mean([1.0, 2.0, 3.0, 4.0]) == 2.5
    assert std([1.0, 2.0, 3.0, 4.0]) == pytest.approx(np.sqrt(5 / 3))
    assert std([0.7]) == 0.0


@pytest.mark.parametrize("bad", [[], [[1.0, 2.0]]])
def test_empty_or_nested_values_are_rejected(bad: list[object]) -> None:
    with pytest.raises(ValueError, match="non-empty 1-D"):
        mean(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty 1-D"):
        bootstrap_ci(bad)  # type: ignore[arg-type]


def test_bootstrap_ci_matches_a_plain_percentile_bootstrap() -> None:
    values = np.random.default_rng(1).random(300)
    rng = np.random.default_rng(42)
    means = [values[rng.integers(0, values.size, values.size)].mean() for _ in range(500)]
    expected = np.percentile(means, [2.5, 97.5])
    assert bootstrap_ci(values, resamples=500, seed=42) == pytest.approx(tuple(expected), abs=1e-12)


def test_bootstrap_ci_is_seeded_and_brackets_the_mean() -> None:
    values = [0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0] * 20
    low, high = bootstrap_ci(values)
    assert (low, high) == bootstrap_ci(values)
    assert low < mean(values) < high
    assert bootstrap_ci(values, seed=1) != (low, high)
    narrow = bootstrap_ci(values, confidence=0.5)
    assert low < narrow[0] < narrow[1] < high


def test_bootstrap_ci_width_is_close_to_the_normal_approximation() -> None:
    values = np.random.default_rng(3).normal(0.6, 0.2, 2000)
    low, high = bootstrap_ci(values, resamples=2000)
    expected = 2 * 1.96 * values.std(ddof=1) / np.sqrt(values.size)
    assert high - low == pytest.approx(expected, rel=0.1)


def test_bootstrap_ci_of_constant_values_is_a_point() -> None:
    assert bootstrap_ci([0.25] * 50) == (0.25, 0.25)
    assert bootstrap_ci([1.0]) == (1.0, 1.0)


def test_bootstrap_in_batches_draws_the_same_resamples(monkeypatch: pytest.MonkeyPatch) -> None:
    values = np.random.default_rng(5).random(1000)
    whole = bootstrap_ci(values, resamples=300)
    monkeypatch.setattr(stats, "_MAX_CELLS", 7 * values.size)  # 7 resamples per batch, the last one short
    assert bootstrap_ci(values, resamples=300) == whole


def test_invalid_bootstrap_settings_are_rejected() -> None:
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ci([1.0, 2.0], confidence=1.0)
    with pytest.raises(ValueError, match="resamples"):
        bootstrap_ci([1.0, 2.0], resamples=0)


def test_paired_bootstrap_sees_a_consistent_small_difference() -> None:
    rng = np.random.default_rng(7)
    runner_up = rng.random(400)  # per-question scores vary a lot between questions...
    winner = np.clip(runner_up + rng.normal(0.03, 0.02, 400), 0, 1)  # ...the difference hardly at all
    low, high = paired_bootstrap_ci(winner, runner_up)
    assert 0 < low < float(np.mean(winner - runner_up)) < high
    unpaired_low, _ = bootstrap_ci(winner)
    _, unpaired_high = bootstrap_ci(runner_up)
    assert unpaired_low < unpaired_high  # the separate intervals overlap: only pairing shows the win
    assert paired_bootstrap_ci([0.5, 0.7, 0.9], [0.4, 0.6, 0.8]) == pytest.approx((0.1, 0.1))


def test_paired_bootstrap_needs_equal_lengths() -> None:
    with pytest.raises(ValueError, match="equal lengths"):
        paired_bootstrap_ci([1.0, 2.0], [1.0])
