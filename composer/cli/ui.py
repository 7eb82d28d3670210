"""`composer ui`: open a study's MLflow store in the MLflow UI, on this machine only."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import typer

from composer.cli.options import EXPERIMENT


def ui_command(
    experiment: Path | None = EXPERIMENT,
    tracking_uri: str | None = typer.Option(
        None, "--tracking-uri", help="MLflow store (default: the experiment's, else sqlite:///.composer/mlflow.db)."
    ),
    port: int = typer.Option(5000, "--port", min=1, max=65535),
) -> None:
    """Start the MLflow UI on 127.0.0.1 for the study's store and print its URL (Ctrl-C stops it)."""
    from composer.redact import scrub_url
    from composer.study.experiment import DEFAULT_WORKDIR, default_tracking_uri, load_experiment
    from composer.study.tracking import is_local_store

    exp = load_experiment(experiment) if experiment is not None else None
    workdir = exp.work_dir if exp is not None else DEFAULT_WORKDIR.resolve()
    uri = tracking_uri or (exp.tracking_uri if exp is not None else default_tracking_uri(workdir))
    if not is_local_store(uri):
        typer.echo(f"MLflow server: {scrub_url(uri)}")
        return
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
               "--default-artifact-root", str(workdir / "mlartifacts"), "--host", "127.0.0.1",
               "--port", str(port)]
    typer.echo(f"MLflow UI for {scrub_url(uri)}: http://127.0.0.1:{port}  (Ctrl-C to stop)")
    # The MLflow server imports litellm, which fetches a price list over the network unless told not to.
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", **os.environ}
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C reaches mlflow too; it stops cleanly
        subprocess.run(command, check=False, env=env)
