"""`composer serve`: a pipeline (config or MLflow model) as an HTTP service: /search, /ask, OpenAI's
/v1/chat/completions, /health, docs at /docs."""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

import typer

from composer.cli.options import QDRANT


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
        "config)."
    ),
    qdrant: str | None = QDRANT,
    trace: str | None = typer.Option(
        None, "--trace", metavar="EXPERIMENT", help="Record every request as an MLflow trace in EXPERIMENT."
    ),
    tracking_uri: str | None = typer.Option(
        None, "--tracking-uri", help="MLflow store for --trace and models:/ (default: $MLFLOW_TRACKING_URI)."
    ),
    max_body_bytes: int = typer.Option(64 * 1024, "--max-body-bytes", min=1, help="Largest request body."),
    max_question_chars: int = typer.Option(4000, "--max-question-chars", min=1, help="Longest question."),
    max_k: int = typer.Option(100, "--max-k", min=1, help="Most hits one /search may ask for."),
    threads: int = typer.Option(32, "--threads", min=1, help="Pipeline calls in flight at once."),
) -> None:
    """Serve CONFIG (indexed on --corpus) or an MLflow model over HTTP until Ctrl-C."""
    import uvicorn

    from composer.cli.ui import is_loopback
    from composer.redact import scrub_url
    from composer.serve.app import Limits, create_app
    from composer.serve.engine import load_engine
    from composer.serve.tracing import Tracer

    started = time.perf_counter()
    if tracking_uri is not None:
        # Read by MLflow if and when it is imported: a model in a local registry opens without it.
        os.environ["MLFLOW_TRACKING_URI"] = tracking_uri
        if "mlflow" in sys.modules:
            sys.modules["mlflow"].set_tracking_uri(tracking_uri)
    engine = load_engine(target, corpus, workdir=workdir, qdrant=qdrant)
    tracer = Tracer(trace, tracking_uri, engine.name) if trace is not None else None
    app = create_app(engine, Limits(max_body_bytes, max_question_chars, max_k, threads), tracer)
    if not is_loopback(host):
        logging.getLogger("composer").warning(
            "--host %s: the service has no login: anyone who can reach port %d of this machine can query "
            "the corpus and spend the pipeline's LLM budget; --host 127.0.0.1 keeps it on this machine",
            host, port,
        )
    where = f"http://{host}:{port}"
    traced = f", tracing into {trace!r} at {scrub_url(tracking_uri or 'the default store')}" if trace else ""
    typer.echo(f"serving {engine.name} ({engine.answerer}) at {where}/ (docs: {where}/docs){traced}; "
               f"loaded in {time.perf_counter() - started:.1f} s", err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
