"""A study whose trials keep failing their failure budget says at which stage their samples failed: a
judge whose replies cannot be parsed and a generator that cannot answer are different causes."""

from __future__ import annotations

import optuna

from composer.judges import FailureBudgetExceeded
from composer.llm import Usage
from composer.record import TrialRecord
from composer.study._optimize import FailureGuard
from composer.study.experiment import StopConfig


def failed(exc: FailureBudgetExceeded) -> optuna.trial.FrozenTrial:
    rec = TrialRecord({}, "", None, error=f"{type(exc).__name__}: {exc}", failure="error")
    state = optuna.trial.TrialState.FAIL
    return optuna.trial.create_trial(state=state, user_attrs={"composer": rec.to_dict()})


def test_the_stop_names_the_stage_whose_samples_failed() -> None:
    judge = FailureBudgetExceeded(7, 12, 0.5, Usage(), {"judge": 7})
    generation = FailureBudgetExceeded(7, 12, 0.5, Usage(), {"generation": 7})
    assert "the judge failed on 7 of 12 samples" in str(judge)
    assert "7 of 12 answers failed to generate" in str(generation)
    study = optuna.create_study()
    for exc in (generation, judge, judge):
        study.add_trial(failed(exc))
    why = FailureGuard(StopConfig(consecutive_failures=3)).check(study.trials)
    assert why is not None and why.startswith("its last 3 trials failed; 2 x FailureBudgetExceeded: ")
    assert "the judge failed on 7 of 12 samples" in why and why.endswith("(and 1 other kinds of error)")
