"""Two workers that draw one configuration at the same instant both run it; neither is a repeat (each
began before the other ended). They hold one slot: a grid of N points with n_trials N is not left one point
short (seen with two Ray workers: 8 trials, 7 configurations, the grid's last point never run)."""

from __future__ import annotations

from typing import Any

from ended_trials import ended_trial

from composer.record import TrialRecord
from composer.study._optimize import target_reached


def _trial(number: int, digest: str, state: str = "COMPLETE") -> Any:
    record = TrialRecord({"retrieval": {"k": number}}, digest, metrics={})
    return ended_trial(number, {}, state, record=record)[0]


def test_two_trials_of_one_configuration_hold_one_slot() -> None:
    trials = [_trial(0, "a"), _trial(1, "b"), _trial(2, "b")]
    assert not target_reached(None, 3, trials=trials)  # type: ignore[arg-type]
    assert target_reached(None, 2, trials=trials)  # type: ignore[arg-type]


def test_running_trials_hold_a_slot_each_until_they_end() -> None:
    trials = [_trial(0, "a"), _trial(1, "", state="RUNNING"), _trial(2, "", state="RUNNING")]
    assert target_reached(None, 3, trials=trials)  # type: ignore[arg-type]
