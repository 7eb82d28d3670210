"""`composer ui`: open a study's MLflow store in the MLflow UI, on the study's runs."""

from __future__ import annotations

import contextlib
import json
import logging
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
WORKERS = ("--workers", "1")
"""One server process: MLflow's default is 4, each importing MLflow (most of a minute on a busy 2-core
machine), for a UI one person reads."""
SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
"""No job runner beside the server (one more process importing MLflow at start): it runs MLflow's own
jobs (scheduled scorers, prompt optimization), which a study's runs do not need; the user's environment
wins."""
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
    allowed_hosts: str | None = typer.Option(
        None, "--allowed-hosts", help="Host names the UI answers to besides localhost and private IPs, "
        "comma-separated, e.g. mlflow.example.com,10.0.0.5:5000 (MLflow refuses other Host headers)."
    ),
    cors_origins: str | None = typer.Option(
        None, "--cors-allowed-origins", help="Web origins that may call the server from a browser, "
        "comma-separated, e.g. http://mlflow.example.com:5000 (default: localhost origins)."
    ),
) -> None:
    """Start the MLflow UI for the study's store (one worker), say where at once, print the URL of the
    study's runs once it answers; Ctrl-C stops it, its workers too."""
    from composer.redact import scrub_url
    from composer.study.experiment import DEFAULT_WORKDIR, default_tracking_uri, load_experiment
    from composer.tracking.setup import is_local_store

    exp = load_experiment(experiment) if experiment is not None else None
    workdir = exp.work_dir if exp is not None else DEFAULT_WORKDIR.resolve()
    uri = tracking_uri or (exp.tracking_uri if exp is not None else default_tracking_uri(workdir))
    if not is_local_store(uri):
        typer.echo(f"MLflow server: {scrub_url(uri)}")
        return
    if not is_loopback(host):
        logging.getLogger("composer").warning("%s", exposed_warning(host, port))
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
               "--default-artifact-root", str(workdir / "mlartifacts"), "--host", host, "--port", str(port),
               *WORKERS]
    for flag, value in (("--allowed-hosts", allowed_hosts), ("--cors-allowed-origins", cors_origins)):
        if value is not None:
            command += [flag, value]
    # The MLflow server imports litellm, which fetches a price list over the network unless told not to.
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "MLFLOW_DISABLE_TELEMETRY": "true", **SERVER_ENV,
           **os.environ}
    base = f"http://{_local(host)}:{port}"
    typer.echo(f"starting the MLflow UI for {scrub_url(uri)} at {base}/ (it answers in a few seconds to a "
               "minute)…", err=True)
    # One process group (server + workers, stopped together); its log on stderr, the URL alone on stdout.
    server = subprocess.Popen(command, env=env, start_new_session=True, stdout=sys.stderr)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
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


def is_loopback(host: str) -> bool:
    """Whether a server bound to ``host`` is reachable from this machine only."""
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


def exposed_warning(host: str, port: int) -> str:
    """What serving beyond this machine means: the UI and its REST API have no login."""
    return (f"--host {host}: the MLflow UI and its REST API have no login: anyone who can reach port "
            f"{port} of this machine can read every run, trace and artifact of the store, and change or "
            "delete them. MLflow answers only requests addressed to localhost or a private IP: to open it by "
            "a host name, add --allowed-hosts NAME:PORT (and --cors-allowed-origins http://NAME:PORT for a "
            "web app on another origin); --host 127.0.0.1 keeps it on this machine")


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
