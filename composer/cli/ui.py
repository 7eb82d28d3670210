"""`composer ui`: open a study's MLflow store in the MLflow UI, on the study's runs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from types import FrameType

import typer

from composer.cli.options import EXPERIMENT
from composer.errors import ComposerError

STARTUP_S = 180.0
"""How long the MLflow server may take to answer (it migrates a new store first)."""
STOP_S = 10.0
"""How long the server and its workers get to stop before they are killed."""


def ui_command(
    experiment: Path | None = EXPERIMENT,
    tracking_uri: str | None = typer.Option(
        None, "--tracking-uri", help="MLflow store (default: the experiment's, else sqlite:///.composer/mlflow.db)."
    ),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to serve on (0.0.0.0: every interface; the UI has no login)."
    ),
    port: int = typer.Option(5000, "--port", min=1, max=65535),
) -> None:
    """Start the MLflow UI for the study's store, print the URL of the study's runs once it answers;
    Ctrl-C stops it, its workers too."""
    from composer.redact import scrub_url
    from composer.study.experiment import DEFAULT_WORKDIR, default_tracking_uri, load_experiment
    from composer.tracking.runs import is_local_store

    exp = load_experiment(experiment) if experiment is not None else None
    workdir = exp.work_dir if exp is not None else DEFAULT_WORKDIR.resolve()
    uri = tracking_uri or (exp.tracking_uri if exp is not None else default_tracking_uri(workdir))
    if not is_local_store(uri):
        typer.echo(f"MLflow server: {scrub_url(uri)}")
        return
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
               "--default-artifact-root", str(workdir / "mlartifacts"), "--host", host, "--port", str(port)]
    # The MLflow server imports litellm, which fetches a price list over the network unless told not to.
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "MLFLOW_DISABLE_TELEMETRY": "true", **os.environ}
    typer.echo(f"starting the MLflow UI for {scrub_url(uri)}…", err=True)
    # One process group (server + workers, stopped together); its log on stderr, the URL alone on stdout.
    server = subprocess.Popen(command, env=env, start_new_session=True, stdout=sys.stderr)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        base = f"http://{_local(host)}:{port}"
        _wait_until_answering(base, server)
        name = exp.mlflow_experiment if exp is not None else None
        url = runs_url(base, _experiment_id(base, name) if name else None)
        typer.echo(f"MLflow UI: {url}  (Ctrl-C to stop)")
        server.wait()
        if server.returncode:
            raise ComposerError(f"the MLflow UI stopped (exit {server.returncode})")
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        stop(server)


def runs_url(base: str, experiment_id: str | None) -> str:
    """The runs view of the experiment, trials sorted by composite, best first (the UI's landing page
    when there is no experiment)."""
    if experiment_id is None:
        return base + "/"
    query = urllib.parse.urlencode({"orderByKey": "metrics.`composite`", "orderByAsc": "false"})
    return f"{base}/#/experiments/{experiment_id}/runs?{query}"


def stop(server: subprocess.Popen[bytes]) -> None:
    """Stop the server's whole process group (its uvicorn/gunicorn workers with it): TERM, then KILL."""
    if server.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, STOP_S), (signal.SIGKILL, STOP_S)):
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            break
        try:
            server.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError, PermissionError):  # workers may outlive their parent
        os.killpg(server.pid, signal.SIGKILL)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _local(host: str) -> str:
    """Where this machine reaches a server bound to ``host``."""
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else (f"[{host}]" if ":" in host else host)


def _wait_until_answering(base: str, server: subprocess.Popen[bytes]) -> None:
    import urllib.request

    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise ComposerError(f"the MLflow UI did not start (exit {server.returncode}); see its output")
        try:
            urllib.request.urlopen(base + "/health", timeout=2).close()
            return
        except (OSError, ValueError):
            time.sleep(0.3)
    raise ComposerError(f"the MLflow UI did not answer at {base} within {STARTUP_S:.0f} s")


def _experiment_id(base: str, name: str) -> str | None:
    """The experiment's id, asked of the server (None if the study has not logged yet)."""
    import urllib.request

    query = urllib.parse.urlencode({"experiment_name": name})
    try:
        with urllib.request.urlopen(f"{base}/api/2.0/mlflow/experiments/get-by-name?{query}", timeout=9) as r:
            return str(json.load(r)["experiment"]["experiment_id"])
    except (OSError, ValueError, KeyError):
        return None
