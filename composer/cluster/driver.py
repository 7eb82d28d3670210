"""The driver of a study on Ray: the process the user started.

It opens (or resumes) the study and its MLflow parent run as one process does (``run_study``), then, in
place of its own trial loop, runs N workers as Ray tasks against the study's RDB storage (Optuna stays the
study: sampler, pruner, fates, budget), draws every worker's trials as they finish (read from the
storage), and when the workers are done does the end once: the held-out re-score, the summary, the report.
Ctrl-C cancels the workers: each ends its trial as Ctrl-C does in one process (failed, run again when
the study resumes), and one that does not stop within ``CANCEL_S`` is killed, its trial failed at once
by the worker-id check (``composer.study._workers``).
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from composer.cluster.refusals import checked, is_cluster, ray_config, ray_module
from composer.errors import ComposerError, ConfigError
from composer.study.experiment import ExperimentConfig, RayConfig

if TYPE_CHECKING:
    import optuna
    from rich.console import Console

    from composer.data.types import QuestionSet
    from composer.study.data import StudyData
    from composer.study.live import StudyProgress
    from composer.study.space import SearchSpace
    from composer.study.study import StudyResult
    from composer.tracking.writer import StudyTracker

POLL_S = 0.5
"""Seconds between two reads of the study's trials for the live view (a read is one storage query)."""
CANCEL_S = 5.0
"""Seconds a cancelled worker has to end its trial as Ctrl-C does before it is killed."""
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def optimize_on_ray(
    exp: ExperimentConfig, *, n_trials: int | None = None, study_name: str | None = None,
    console: Console | None = None, strict: bool = False,
) -> StudyResult:
    """Run (or continue) the experiment's study with its workers on Ray (``executor: {ray: ...}``)."""
    from composer.study.study import run_study

    config = ray_config(exp)
    if config is None:
        raise ConfigError("no Ray executor: set executor: {ray: {address: local}} or --ray local",
                          field="executor")
    exp = checked(exp, config)
    ray = ray_module()  # without the extra: one line, before the study is opened
    if not is_cluster(config.address) and _joined_elsewhere(ray):
        raise ConfigError("this process is already connected to a Ray cluster on other machines, which "
                          "--ray local would use unchecked: give its address in executor.ray.address "
                          "(--ray), or call ray.shutdown() first", field="executor.ray.address")
    return run_study(exp, n_trials=n_trials, study_name=study_name, console=console, strict=strict,
                     trials=RayTrials(config))


@dataclass
class RayTrials:
    """The trial loop of ``run_study`` on Ray (a ``TrialLoop``)."""

    config: RayConfig

    def __call__(
        self, study: optuna.Study, exp: ExperimentConfig, data: StudyData, tracker: StudyTracker,
        console: Console, n_trials: int | None, held_out: QuestionSet | None,
    ) -> None:
        from composer.study import _optimize
        from composer.study.live import StudyProgress
        from composer.study.study import trials_to_run

        todo = trials_to_run(study, exp, data, tracker, console, n_trials, held_out)
        if todo is None:
            return
        target, done = todo
        ray = ray_module()
        opened = not ray.is_initialized()  # a connection the user made is theirs to shut down
        encoders = None
        try:
            started = _connect(ray, self.config.address)
            _check_placeable(ray, self.config.resources)
            encoders = _start_encoders(ray, study.study_name, self.config, data.space)
            dashboard = started.dashboard_url
            console.print(f"Ray: {self.config.workers} workers on {self.config.address}"
                          + (f" · dashboard http://{dashboard}" if dashboard else ""), highlight=False)
            task = ray.remote(max_calls=1, max_retries=_optimize.MAX_RETRIES,
                              **_reserved(self.config.resources))(_work_task())
            refs = [task.remote(exp, target, study.study_name) for _ in range(self.config.workers)]
            with StudyProgress(console, target, done, exp.timeout) as progress:
                _follow(ray, refs, study, progress)
            if encoders is not None:
                console.print(f"Ray: encoding actors encoded {' + '.join(map(str, encoders.counts()))} texts",
                              highlight=False)
        except KeyboardInterrupt:
            _optimize.record_lost_trials(study, tracker, untagged_after_s=2 * exp.heartbeat_interval)
            raise
        finally:
            if encoders is not None:
                from composer.embedding.actors import stop_encoders

                stop_encoders(encoders)
            if opened and not is_cluster(self.config.address):
                ray.shutdown()


def _connect(ray: Any, address: str) -> Any:
    """Start Ray here (``local``) or join the cluster; the context (its dashboard's address). The workers'
    output stays in Ray's logs (the dashboard): the driver draws the study from its storage.

    ``ray.init`` sets a SIGTERM handler that exits on the spot (``sys.exit``) and is never taken back: the
    handler before it is put back, so a SIGTERM still ends the study as Ctrl-C does (``stop_on_signals``)
    and a host application keeps its own."""
    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    try:
        return ray.init(address=address, log_to_driver=False, ignore_reinit_error=True)
    except ConnectionError as exc:
        raise ComposerError(f"no Ray cluster at {address} ({exc}): start one (`ray start --head`), give its "
                            "address, or run on this machine with --ray local") from None
    finally:
        if before is not None:  # None: a handler not set from Python, which cannot be put back
            signal.signal(signal.SIGTERM, before)


def _joined_elsewhere(ray: Any) -> bool:
    """Whether this process is already connected to Ray with a node on another machine: ``ray.init``
    would reuse that connection for ``local`` (``ignore_reinit_error``), past the cluster's refusals."""
    if not ray.is_initialized():
        return False
    here = ray.util.get_node_ip_address()
    return any(node.get("NodeManagerAddress") != here for node in ray.nodes() if node.get("Alive"))


def _work_task() -> Any:
    from composer.cluster.worker import work

    return work


def _reserved(resources: dict[str, float]) -> dict[str, Any]:
    """Ray's task options for the resources each worker reserves (``{CPU: 2, GPU: 0.5, custom: 1}``)."""
    rest = {k: v for k, v in resources.items() if k not in ("CPU", "GPU")}
    return {"num_cpus": resources.get("CPU", 1.0), "num_gpus": resources.get("GPU", 0.0),
            **({"resources": rest} if rest else {})}


def _check_placeable(ray: Any, resources: dict[str, float]) -> None:
    """A ConfigError unless some node of the cluster can run a worker: Ray would wait forever to place
    a task that no node fits, and the driver with it."""
    asked = _reserved(resources)
    need = {"CPU": asked["num_cpus"], "GPU": asked["num_gpus"], **asked.get("resources", {})}
    nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
    if not any(all(node.get(key, 0.0) >= value for key, value in need.items()) for node in nodes):
        largest: dict[str, float] = max(nodes, key=lambda node: node.get("CPU", 0.0), default={})
        shown = ", ".join(f"{key}: {largest.get(key, 0.0):g}" for key in need)
        raise ConfigError(f"no node of the Ray cluster can run a worker asking {resources} (the largest has "
                          f"{shown}): ask less in executor.ray.resources", field="executor.ray.resources")


def _start_encoders(ray: Any, study: str, config: RayConfig, space: SearchSpace) -> Any:
    """The study's encoding actors when some configuration of its space retrieves with a model (dense or
    hybrid; None otherwise), on GPUs when its embedding may run on cuda, with what the workers leave
    free (``plan_encoders``: none when nothing is, each worker then encoding itself)."""
    if space.free or not {"dense", "hybrid"} & set(space.possible("retrieval.mode")):
        return None
    from composer.embedding.actors import plan_encoders, start_encoders

    asked = _reserved(config.resources)
    device = "cuda" if {"cuda", "auto"} & set(space.possible("embedding.device")) else "cpu"
    plan = plan_encoders(ray.cluster_resources(), workers=config.workers, device=device,
                         worker={"CPU": asked["num_cpus"], "GPU": asked["num_gpus"]},
                         actors=config.encoders.actors, resources=config.encoders.resources)
    return None if plan is None else start_encoders(study, plan)


def _follow(ray: Any, refs: Sequence[Any], study: optuna.Study, progress: StudyProgress) -> None:
    """Wait for the workers, drawing each trial that finishes (whichever worker ran it); a worker's
    error is raised here as its one line, the other workers cancelled. Ctrl-C cancels them all."""
    seen = {t.number for t in study.get_trials(deepcopy=False) if t.state.is_finished()}
    pending = list(refs)
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=POLL_S)
            _show(study, progress, seen)
            for ref in ready:
                error = _outcome(ray, ref)
                if error is not None:
                    _cancel(ray, pending, study)
                    raise error
        _show(study, progress, seen)
    except KeyboardInterrupt:
        _cancel(ray, refs, study)
        raise


def _outcome(ray: Any, ref: Any) -> ComposerError | None:
    """A worker's ComposerError (its one line), or a Ray failure (a worker lost more often than Ray
    retries it) as one. An exception a worker raised is named by its cause: Ray's own first line is
    ``ray::work() (pid=..., ip=...)`` in colour, and the workers' logs do not reach the driver."""
    from ray.exceptions import RayError, RayTaskError

    try:
        result: ComposerError | None = ray.get(ref)
    except RayTaskError as exc:
        if isinstance(exc.cause, ComposerError):
            return exc.cause
        line = _plain(f"{type(exc.cause).__name__}: {exc.cause}")
    except RayError as exc:
        line = _plain(str(exc)) or type(exc).__name__
    else:
        return result
    return ComposerError(f"a Ray worker of the study failed: {line}")


def _plain(text: str) -> str:
    """The first line of ``text`` without terminal colour codes."""
    lines = _COLOUR.sub("", text).strip().splitlines()
    return lines[0] if lines else ""


def _show(study: optuna.Study, progress: StudyProgress, seen: set[int]) -> None:
    """Draw the trials that finished since the last look, in number order."""
    trials = study.get_trials(deepcopy=False)
    for trial in sorted((t for t in trials if t.state.is_finished() and t.number not in seen),
                        key=lambda t: t.number):
        seen.add(trial.number)
        progress(study, trial, trials)


def _cancel(ray: Any, refs: Sequence[Any], study: optuna.Study) -> None:
    """Stop the workers: a KeyboardInterrupt in each, which ends its trial as Ctrl-C ends one in a single
    process (Ray's ``wait`` says a cancelled task is done at once, so the study's running trials tell
    when they have); those still running after ``CANCEL_S`` are killed, and their trials failed as lost
    once their processes are gone (their retries and runs: ``record_lost_trials``, by the caller)."""
    if not refs:
        return
    for ref in refs:
        ray.cancel(ref)
    deadline = time.monotonic() + CANCEL_S
    while _running(study) and time.monotonic() < deadline:
        time.sleep(POLL_S / 2)
    if not _running(study):
        return
    from composer.study._workers import fail_trials_of_gone_workers

    for ref in refs:
        ray.cancel(ref, force=True)
    deadline = time.monotonic() + CANCEL_S  # a kill lands after ``cancel`` returns
    while _running(study) and time.monotonic() < deadline:
        fail_trials_of_gone_workers(study)  # this machine's; another machine's by heartbeat, later
        time.sleep(POLL_S / 2)


def _running(study: optuna.Study) -> bool:
    from optuna.trial import TrialState

    return bool(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))
