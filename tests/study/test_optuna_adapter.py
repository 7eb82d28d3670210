"""The private parts of Optuna that ``composer.study._optuna`` wraps exist and behave in the installed
Optuna: an upgrade that moves one fails here, by name."""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from composer.study import _optuna


def test_the_installed_optuna_is_a_supported_major_version() -> None:
    major = int(optuna.__version__.split(".")[0])
    assert major in _optuna.SUPPORTED, f"optuna {optuna.__version__}: check composer/study/_optuna.py"


def test_every_wrapped_private_part_works(tmp_path: Path) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'o.db'}", study_name="adapter")
    seen: dict[str, Any] = {}

    def objective(trial: optuna.Trial) -> float:
        _optuna.set_system_attr(study, trial, "composer.tag", "worker-1")
        seen["attrs"] = _optuna.system_attrs(trial)
        seen["id"] = _optuna.trial_id(trial)
        return trial.suggest_float("x", 0, 1)

    study.optimize(objective, n_trials=1)
    (done,) = _optuna.all_trials(study)
    assert seen["attrs"]["composer.tag"] == "worker-1"
    assert _optuna.trial_id(done) == seen["id"]
    assert _optuna.get_trial(study, _optuna.trial_id(done)).number == done.number

    running = study.ask()
    assert _optuna.set_state(study, _optuna.trial_id(running), TrialState.FAIL)
    assert _optuna.get_trial(study, _optuna.trial_id(running)).state == TrialState.FAIL
    with pytest.raises(Exception, match="finished"):  # Optuna refuses to change a finished trial
        _optuna.set_state(study, _optuna.trial_id(running), TrialState.FAIL)


def test_trials_beat_through_composers_heartbeat_and_stale_trials_reach_its_callback(tmp_path: Path) -> None:
    """``use_heartbeat`` swaps the thread Optuna's optimize loop records heartbeats in; the storage's
    stale-trial callback is the one ``make_storage`` gave it."""
    import threading

    from composer.study._storage import make_storage
    from composer.study._workers import Heartbeat, StaleTrials

    storage = make_storage(f"sqlite:///{tmp_path / 'o.db'}", heartbeat_interval=1)
    study = optuna.create_study(storage=storage, study_name="beats")
    _optuna.use_heartbeat(Heartbeat)
    beating: list[threading.Thread] = []

    def objective(trial: optuna.Trial) -> float:
        beating.extend(t for t in threading.enumerate() if "heartbeat" in t.name)
        return 1.0

    study.optimize(objective, n_trials=1)
    assert [(t.name.startswith("composer-heartbeat-"), t.daemon) for t in beating] == [(True, True)]
    assert isinstance(_optuna.stale_trial_callback(study), StaleTrials)


def test_a_heartbeat_is_recorded_at_the_storages_interval(tmp_path: Path) -> None:
    """``heartbeat_interval`` and ``record_heartbeat`` reach the storage's heartbeat: a trial that beats is
    not stale, one that stopped beating is, once the grace period is over."""
    from composer.study._storage import make_storage

    storage = make_storage(f"sqlite:///{tmp_path / 'o.db'}", heartbeat_interval=1)
    study = optuna.create_study(storage=storage, study_name="beat")
    assert _optuna.heartbeat_interval(storage) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Optuna's note that heartbeats are for study.optimize
        beating, silent = study.ask(), study.ask()
    for trial in (beating, silent):
        _optuna.record_heartbeat(storage, _optuna.trial_id(trial))
    time.sleep(3.1)  # past the grace period (2 x the interval, in whole seconds) for both
    _optuna.record_heartbeat(storage, _optuna.trial_id(beating))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    states = [_optuna.get_trial(study, _optuna.trial_id(t)).state for t in (beating, silent)]
    assert states == [TrialState.RUNNING, TrialState.FAIL]
