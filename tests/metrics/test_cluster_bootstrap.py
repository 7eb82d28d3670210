"""The cluster bootstrap: a conversation's turns are resampled together, and a set of lone questions gets
today's intervals to the digit."""

from __future__ import annotations

import numpy as np
import pytest

from composer.metrics.stats import (
    bootstrap_ci,
    paired_bootstrap_ci,
    paired_statistic_ci,
    scored_means,
)


def _conversations(n: int, turns: int) -> list[str]:
    return [f"c{i}" for i in range(n) for _ in range(turns)]


def test_every_question_its_own_group_gives_todays_intervals_exactly() -> None:
    rng = np.random.default_rng(11)
    a, b = rng.random(200), rng.random(200)
    a[::7] = np.nan
    own = [f"q{i}" for i in range(200)]
    values = a[~np.isnan(a)]
    assert bootstrap_ci(values, groups=[f"q{i}" for i in range(values.size)]) == bootstrap_ci(values)
    assert paired_bootstrap_ci(b, b[::-1], groups=own) == paired_bootstrap_ci(b, b[::-1])
    grouped = scored_means({"a": a, "b": b}, groups=own)
    plain = scored_means({"a": a, "b": b})
    assert all(np.array_equal(grouped[k], plain[k], equal_nan=True) for k in plain)

    def first(means: dict[str, np.ndarray]) -> np.ndarray:
        return means["a"]

    assert paired_statistic_ci({"a": a}, {"a": b}, first, groups=own) == paired_statistic_ci(
        {"a": a}, {"a": b}, first
    )


def test_two_conversations_of_ten_correlated_turns_are_two_draws_not_twenty() -> None:
    """Perfectly correlated turns: a conversation found whole or missed whole. Over 2 conversations the
    mean is 0, 1/2 or 1 in a resample, so the CI spans [0, 1]; as 20 independent turns it is narrow."""
    values = [1.0] * 10 + [0.0] * 10
    groups = _conversations(2, 10)
    assert bootstrap_ci(values, groups=groups) == (0.0, 1.0)
    low, high = bootstrap_ci(values)
    assert 0.2 < low < 0.5 < high < 0.8
    means = scored_means({"hit": values}, groups=groups)["hit"]
    assert set(np.unique(means).tolist()) <= {0.0, 0.5, 1.0}  # whole conversations drawn, never some turns
    independent = scored_means({"hit": values})["hit"]
    assert len(np.unique(independent)) > 3


def test_resamples_draw_whole_conversations() -> None:
    """Each resample's mean is the mean over the turns of the conversations it drew (each as often as
    drawn), conversations of unequal lengths included."""
    rng = np.random.default_rng(3)
    lengths = [3, 1, 5, 2, 4, 6]
    groups = [f"c{i}" for i, n in enumerate(lengths) for _ in range(n)]
    values = rng.random(len(groups))
    members = [np.flatnonzero(np.array(groups) == f"c{i}") for i in range(len(lengths))]
    draws = np.random.default_rng(0).integers(0, len(lengths), size=(50, len(lengths)))
    expected = [values[np.concatenate([members[g] for g in row])].mean() for row in draws]
    means = scored_means({"v": values}, groups=groups, resamples=50, seed=0)["v"]
    assert means == pytest.approx(expected, abs=1e-12)


def test_paired_bootstrap_over_conversations_is_wider_when_conversations_differ() -> None:
    """The winner gains on one conversation's turns only: over turns the gain looks certain, over the 4
    conversations it is not."""
    runner_up = np.zeros(40)
    winner = np.where(np.arange(40) < 10, 1.0, 0.0)
    groups = _conversations(4, 10)
    plain = paired_bootstrap_ci(winner, runner_up)
    clustered = paired_bootstrap_ci(winner, runner_up, groups=groups)
    assert plain[0] > 0
    assert clustered[0] == 0.0
    assert clustered[1] - clustered[0] > 2 * (plain[1] - plain[0])


def test_groups_need_one_key_per_value() -> None:
    with pytest.raises(ValueError, match="one group per value"):
        bootstrap_ci([1.0, 0.0, 1.0], groups=["a", "b"])
