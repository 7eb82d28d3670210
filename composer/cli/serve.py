"""`composer serve`: a pipeline (config or MLflow model) as an HTTP service: /search, /ask, OpenAI's
/v1/chat/completions, /health, docs at /docs."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import typer

from composer.cli.options import ALLOW_ENV, ALLOW_MODIFIED, QDRANT
from composer.errors import ComposerError, InputError

if TYPE_CHECKING:
    import uvicorn


def serve_command(
    target: str = typer.Argument(
        ..., metavar="CONFIG|MODEL_URI",
        help="A pipeline YAML or export file, or an MLflow model: models:/NAME@alias, runs:/ID/path.",
    ),
    corpus: Path | None = typer.Option(
        None, "--corpus", help="Documents to index (a config needs them; a model may bring its own index)."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to serve on (0.0.0.0: every interface)."),
    port: int = typer.Option(8000, "--port", min=1, max=65535),
    workdir: Path | None = typer.Option(
        None, "--workdir", help="Where caches and Qdrant Edge indexes live (default: .composer beside the "
        "config); for a models:/ or runs:/ target, the work dir of the study whose MLflow store holds it."
    ),
    experiment: Path | None = typer.Option(
        None, "--experiment", "-e", help="For a models:/ or runs:/ target: the experiment YAML of the study "
        "whose MLflow store holds it."
    ),
    qdrant: str | None = QDRANT,
    allow_env: list[str] | None = ALLOW_ENV,
    allow_modified_model: bool = ALLOW_MODIFIED,
    trace: str | None = typer.Option(
        None, "--trace", metavar="EXPERIMENT", help="Record every request as an MLflow trace in EXPERIMENT."
    ),
    tracking_uri: str | None = typer.Option(
        None, "--tracking-uri", help="MLflow store for --trace and models:/ (default: the store of -e or "
        "--workdir, else $MLFLOW_TRACKING_URI, else .composer/mlflow.db here; never created to be read)."
    ),
    max_body_bytes: int = typer.Option(64 * 1024, "--max-body-bytes", min=1, help="Largest request body."),
    max_question_chars: int = typer.Option(4000, "--max-question-chars", min=1, help="Longest question."),
    max_k: int = typer.Option(100, "--max-k", min=1, help="Most hits one /search may ask for."),
    threads: int = typer.Option(32, "--threads", min=1, help="Pipeline calls in flight at once."),
    token_env: str | None = typer.Option(
        None, "--token-env", metavar="VAR", help="Require 'Authorization: Bearer <token>', the token read "
        "from the environment variable VAR (never give it on the command line); /health stays open."
    ),
    allowed_hosts: list[str] | None = typer.Option(
        None, "--allowed-host", metavar="NAME", help="A Host name to answer (repeatable; any port; '*' any). "
        "Default: localhost, 127.0.0.1 and ::1 on a loopback --host, any Host otherwise."
    ),
    request_timeout: float = typer.Option(
        10.0, "--request-timeout", min=0.1, help="Seconds a client has to send a whole request, from "
        "connecting or its previous response; then it is disconnected."
    ),
    keep_alive: int = typer.Option(5, "--keep-alive", min=1, help="Seconds an idle connection stays open."),
    max_connections: int | None = typer.Option(
        None, "--max-connections", min=1, help="Open connections at most (default: 1000, or half the "
        "open-file limit); past it the one waiting longest without a request is closed."
    ),
) -> None:
    """Serve CONFIG (indexed on --corpus) or an MLflow model over HTTP until Ctrl-C (or SIGTERM, SIGHUP)."""
    from composer.cli.ui import is_loopback
    from composer.redact import scrub_url
    from composer.serve.app import Limits, create_app
    from composer.serve.engine import load_engine
    from composer.serve.guard import LOOPBACK_HOSTS, Access, Connections, server
    from composer.serve.tracing import Tracer

    token = None
    if token_env is not None:
        token = os.environ.get(token_env, "").strip()
        if not token:
            raise ComposerError(f"--token-env {token_env}: the environment variable is not set or empty")
    hosts = tuple(allowed_hosts) if allowed_hosts else LOOPBACK_HOSTS if is_loopback(host) else None
    tracking_uri = model_store(target, tracking_uri, experiment, workdir)
    with _StopOnSignal() as running:
        started = time.perf_counter()
        if tracking_uri is not None:
            # Read by MLflow if and when it is imported: a model in a local registry opens without it.
            os.environ["MLFLOW_TRACKING_URI"] = tracking_uri
            if "mlflow" in sys.modules:
                sys.modules["mlflow"].set_tracking_uri(tracking_uri)
        engine = load_engine(target, corpus, workdir=workdir, qdrant=qdrant)
        tracer = Tracer(trace, tracking_uri, engine.name) if trace is not None else None
        app = create_app(engine, Limits(max_body_bytes, max_question_chars, max_k, threads), tracer,
                         Access(token, hosts))
        if not is_loopback(host) and token is None:
            logging.getLogger("composer").warning(
                "--host %s: the service has no login: anyone who can reach port %d of this machine can query "
                "the corpus and spend the pipeline's LLM budget; --token-env VAR requires a token, --host "
                "127.0.0.1 keeps it on this machine", host, port,
            )
        where = f"http://{host}:{port}"
        store = scrub_url(tracking_uri or "the default store")
        traced = f", tracing into {trace!r} at {store}" if trace else ""
        typer.echo(f"serving {engine.name} ({engine.answerer}) at {where}/ (docs: {where}/docs){traced}; "
                   f"loaded in {time.perf_counter() - started:.1f} s", err=True)
        running.server = server(app, host, port, Connections(request_timeout, keep_alive, max_connections))
        running.server.run()


def model_store(
    target: str, tracking_uri: str | None, experiment: Path | None, workdir: Path | None
) -> str | None:
    """The MLflow store to read a models:/ or runs:/ ``target`` from: ``--tracking-uri``, else the store
    of the study's experiment or work dir, else MLflow's variables (None: left to them), else the default
    work dir's here (``.composer/mlflow.db``), never MLflow's own default (``./mlflow.db``, created on
    reading). A config target keeps ``tracking_uri`` (its --trace store) and takes no -e."""
    from composer.serve.engine import MODEL_SCHEMES
    from composer.study.experiment import DEFAULT_WORKDIR, default_tracking_uri, load_experiment

    if not target.startswith(MODEL_SCHEMES):
        if experiment is not None:
            raise InputError(f"applies to a models:/ or runs:/ target only (the study whose MLflow store "
                             f"holds it); {target} is a config", field="experiment")
        return tracking_uri
    if tracking_uri is not None:
        return tracking_uri
    if experiment is not None:
        return load_experiment(experiment).tracking_uri
    if workdir is not None:
        return default_tracking_uri(workdir)
    if os.environ.get("MLFLOW_REGISTRY_URI") or os.environ.get("MLFLOW_TRACKING_URI"):
        return None
    return default_tracking_uri(DEFAULT_WORKDIR)


class _StopOnSignal:
    """SIGTERM and SIGHUP (docker stop, systemd, ``timeout``, a closed terminal) stop the server as Ctrl-C
    does: requests in flight finish, then the process exits through ``SystemExit`` (128 + the signal), so
    exit handlers run and a model's temporary work dir is removed; by default both killed the process
    without them. Installed for the whole command: a signal while the model loads stops it as well."""

    SIGNALS = (signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.server: uvicorn.Server | None = None
        self.previous: list[Any] = []

    def __enter__(self) -> _StopOnSignal:
        self.previous = [signal.signal(sig, self) for sig in self.SIGNALS]
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in zip(self.SIGNALS, self.previous, strict=True):
            signal.signal(sig, handler)

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.server is not None and self.server.started and not self.server.should_exit:
            self.server.handle_exit(signum, frame)  # uvicorn raises the signal again once it has stopped
            return
        raise SystemExit(128 + signum)
