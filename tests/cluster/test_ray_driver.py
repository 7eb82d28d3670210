"""The driver's side of the workers, without a cluster (a stand-in for Ray's ``wait``, ``get`` and
``cancel``): a worker's error reaches the user as its one line and the other workers are cancelled;
trials finished by any worker are drawn once each, in number order."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest
from ray.exceptions import RayTaskError, WorkerCrashedError

from composer.cluster.driver import _follow
from composer.errors import ComposerError, ConfigError, InputError


class StandIn:
    """Ray as the driver uses it: each "reference" is the worker's outcome itself."""

    def __init__(self) -> None:
        self.cancelled: list[Any] = []

    def wait(self, pending: list[Any], num_returns: int, timeout: float) -> tuple[list[Any], list[Any]]:
        return pending[:num_returns], pending[num_returns:]

    def get(self, ref: Any) -> Any:
        if isinstance(ref, BaseException) and not isinstance(ref, ComposerError):
            raise ref
        return ref

    def cancel(self, ref: Any, force: bool = False) -> None:
        self.cancelled.append(ref)


def test_a_worker_s_error_is_raised_as_its_line_and_the_other_workers_cancelled() -> None:
    ray, study = StandIn(), optuna.create_study()
    unreadable = InputError("the worker on node-2 cannot read /data/corpus.jsonl", field="corpus")
    with pytest.raises(InputError) as raised:
        _follow(ray, [unreadable, None], study, lambda *args: None)  # type: ignore[arg-type]
    assert raised.value is unreadable and ray.cancelled == [None]


def test_a_worker_ray_lost_for_good_is_one_line() -> None:
    with pytest.raises(ComposerError, match="a Ray worker of the study failed"):
        _follow(StandIn(), [WorkerCrashedError()], optuna.create_study(), lambda *args: None)  # type: ignore[arg-type]


def test_a_worker_s_exception_is_named_with_its_cause_not_ray_s_header() -> None:
    header = "\x1b[36mray::work()\x1b[39m (pid=12, ip=10.0.0.2)"
    crashed = RayTaskError("work", f"{header}\n  File \"w.py\", line 3\nValueError: boom", ValueError("boom"))
    with pytest.raises(ComposerError) as raised:
        _follow(StandIn(), [crashed], optuna.create_study(), lambda *args: None)  # type: ignore[arg-type]
    assert str(raised.value) == "a Ray worker of the study failed: ValueError: boom"


def test_a_composer_error_a_worker_raised_is_its_own_line() -> None:
    cause = InputError("the worker on node-2 cannot read /data/corpus.jsonl", field="corpus")
    crashed = RayTaskError("work", "\x1b[36mray::work()\x1b[39m (pid=12, ip=10.0.0.2)", cause)
    with pytest.raises(InputError) as raised:
        _follow(StandIn(), [crashed], optuna.create_study(), lambda *args: None)  # type: ignore[arg-type]
    assert raised.value is cause


def test_every_finished_trial_is_drawn_once_in_number_order() -> None:
    study = optuna.create_study()
    for value in (0.3, 0.1, 0.2):
        study.add_trial(optuna.trial.create_trial(value=value))
    drawn: list[int] = []
    already = {0}  # finished before the workers started: not drawn again
    study.add_trial(optuna.trial.create_trial(value=0.4))

    def progress(study: optuna.Study, trial: optuna.trial.FrozenTrial, trials: Any) -> None:
        drawn.append(trial.number)

    from composer.cluster.driver import _show

    _show(study, progress, already)  # type: ignore[arg-type]
    _show(study, progress, already)  # type: ignore[arg-type]
    assert drawn == [1, 2, 3]


def test_no_cluster_at_the_address_is_one_line() -> None:
    from composer.cluster.driver import _connect

    class Unreachable:
        def init(self, **options: Any) -> None:
            raise ConnectionError("Could not find any running Ray instance")

    with pytest.raises(ComposerError, match=r"no Ray cluster at auto .*--ray local"):
        _connect(Unreachable(), "auto")


class Started(StandIn):
    """Ray as ``RayTrials`` starts it: ``init`` connects (and fails, with ``fails``), ``shutdown`` counted;
    ``before``: connected before the driver started (by the user's own ``ray.init``)."""

    def __init__(self, before: bool = False, fails: bool = False, ip: str = "10.0.0.1") -> None:
        super().__init__()
        self.connected, self.fails, self.ip, self.shutdowns = before, fails, ip, 0
        self.util = SimpleNamespace(get_node_ip_address=lambda: "10.0.0.1")  # this machine

    def is_initialized(self) -> bool:
        return self.connected

    def init(self, **options: Any) -> Any:
        self.connected = True
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # as ray.init does
        if self.fails:
            raise RuntimeError("the raylet died while starting")
        return None

    def nodes(self) -> list[dict[str, Any]]:  # no node fits a worker: the driver stops after connecting
        return [{"Alive": True, "Resources": {"CPU": 0.0}, "NodeManagerAddress": self.ip}]

    def shutdown(self) -> None:
        self.shutdowns += 1


def run_trials(ray: Started, monkeypatch: pytest.MonkeyPatch) -> None:
    from composer.cluster import driver
    from composer.study.experiment import RayConfig

    monkeypatch.setattr(driver, "ray_module", lambda: ray)
    monkeypatch.setattr("composer.study.study.trials_to_run", lambda *args: (2, 0))
    with pytest.raises((RuntimeError, ComposerError)):
        driver.RayTrials(RayConfig())(optuna.create_study(), *[None] * 6)  # type: ignore[arg-type]


def test_a_local_ray_that_fails_to_start_is_shut_down(monkeypatch: pytest.MonkeyPatch) -> None:
    ray = Started(fails=True)
    run_trials(ray, monkeypatch)
    assert ray.shutdowns == 1


def test_a_connection_the_driver_did_not_open_is_left_open(monkeypatch: pytest.MonkeyPatch) -> None:
    ray = Started(before=True)
    run_trials(ray, monkeypatch)
    assert ray.shutdowns == 0


def test_ray_local_in_a_process_joined_to_another_machine_s_cluster_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from sample_study import write_experiment

    from composer.cluster import driver
    from composer.study.experiment import load_experiment

    exp = load_experiment(write_experiment(tmp_path, executor={"ray": {"address": "local"}}))
    monkeypatch.setattr(driver, "ray_module", lambda: Started(before=True, ip="10.9.9.9"))
    with pytest.raises(ConfigError, match=r"already connected to a Ray cluster .*executor\.ray\.address"):
        driver.optimize_on_ray(exp)
    assert not (tmp_path / ".composer").exists()


def test_ray_s_sigterm_handler_is_taken_back_so_sigterm_still_ends_the_study_as_ctrl_c(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from composer.study.study import stop_on_signals

    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    with stop_on_signals():
        composer_s = signal.getsignal(signal.SIGTERM)
        assert composer_s != signal.SIG_DFL
        run_trials(Started(), monkeypatch)
        assert signal.getsignal(signal.SIGTERM) == composer_s
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # nothing of Ray's left behind
