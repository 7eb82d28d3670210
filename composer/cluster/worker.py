"""A Composer worker as a Ray task: the trial loop of one ``composer optimize`` worker, on the study's
RDB storage, under the driver's MLflow parent run.

Each task runs in a process of its own (``max_calls=1``): a worker's state (its open indexes, its MLflow
writer, its worker id) ends with it, and a process Ray kills or loses leaves a trial whose worker is
gone, failed and retried by the next worker that looks (``composer.study._workers``).
"""

from __future__ import annotations

import os
import signal
import socket

from composer.errors import ComposerError, InputError
from composer.study.experiment import ExperimentConfig


def work(exp: ExperimentConfig, n_trials: int | None, study_name: str) -> ComposerError | None:
    """Run the study's trials until it holds its target; a ComposerError is returned, not raised, so
    that the driver raises it as the one line it is (Ray would wrap it in its own traceback)."""
    from composer.embedding.actors import attach_encoders
    from composer.study.study import run_worker

    # A Ray worker may inherit SIGINT ignored (a driver started in the background): ray.cancel sends a
    # KeyboardInterrupt, which must end the trial as Ctrl-C does.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _readable(exp)
        attach_encoders(study_name)  # the driver's encoding actors, if it started any
        run_worker(exp, n_trials=n_trials, study_name=study_name)
    except ComposerError as exc:
        return exc
    return None


def _readable(exp: ExperimentConfig) -> None:
    """The experiment's files as this machine sees them: one that is missing or unreadable is named
    with the machine, for the driver to report (the experiment reaches a worker; its files may not)."""
    files = {"corpus": exp.corpus, "questions": exp.questions, "search_space": exp.search_space}
    for field, path in files.items():
        if path is not None and not os.access(path, os.R_OK):
            raise InputError(f"the worker on {socket.gethostname()} cannot read {path}: every machine must "
                             "see the experiment's files at the same path (docs/how-to/cluster.md)",
                             field=field)
