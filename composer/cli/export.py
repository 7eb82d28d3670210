"""`composer export`: write a study's best pipeline as YAML (for `composer eval --config`) or a script."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import typer

from composer.cli.options import ALLOW_ENV, EXPERIMENT, STORAGE, STUDY, flag


def export_command(
    study: str | None = STUDY,
    out: Path | None = typer.Option(None, "--out", "-o", help="File to write (best.yaml, best.py)."),
    fmt: Literal["yaml", "python"] = typer.Option(
        "yaml", "--format", help="yaml: pipeline + scores + provenance; python: a runnable script."
    ),
    trial: int | None = typer.Option(None, "--trial", help="Export this trial instead of the best one."),
    experiment: Path | None = EXPERIMENT,
    storage: str | None = STORAGE,
    register: str | None = typer.Option(
        None, "--register", metavar="NAME", help="Also register it in MLflow's Model Registry as NAME "
        "(alias challenger): a self-contained model, index included. Needs --experiment."
    ),
    promote: bool = typer.Option(
        False, "--promote", help="With --register: move the champion alias to it (refused for a winner the "
        "held-out questions found really worse than the runner-up, unless --force)."
    ),
    force: bool = flag("--force", "With --promote: promote even a winner the held-out questions found "
                       "really worse than the runner-up."),
    allow_env: list[str] | None = ALLOW_ENV,
) -> None:
    """Export the best trial's self-contained pipeline config, its scores and provenance; or register it
    as an MLflow model."""
    from composer.console import make_console
    from composer.errors import InputError
    from composer.record import TrialRecord
    from composer.study.experiment import locate_study
    from composer.study.export import best_trial, export_document, write_export
    from composer.study.registry import (
        CHALLENGER,
        CHAMPION,
        Where,
        check_name,
        check_promotion,
        held_out_loss,
        register_winner,
    )
    from composer.study.study import load_study

    if out is None and register is None:
        raise InputError("say where: --out FILE, or --register NAME", field="out")
    if promote and register is None:
        raise InputError("--promote moves the champion alias of a model: add --register NAME",
                         field="promote")
    if force and not promote:
        raise InputError("--force lets --promote make a held-out loser the champion: add --promote",
                         field="force")
    if register is not None:
        check_name(register)
    name, url, exp = locate_study(study, experiment, storage)
    loaded = load_study(name, url)
    chosen = best_trial(loaded, trial)
    if promote:  # before anything is written
        check_promotion(loaded, chosen.number, force=force)
    if register is not None and exp is None:
        raise InputError("--register needs --experiment EXPERIMENT.yaml (its MLflow store and work dir)",
                         field="experiment")
    record = TrialRecord.of(chosen)
    composite = record.composite if record is not None else None
    score = f" (composite {composite:.4f})" if composite is not None else ""
    console = make_console(stderr=True, soft_wrap=True)
    if out is not None:
        write_export(export_document(loaded, chosen, url), out, fmt)
        console.print(f"trial #{chosen.number}{score} of study {name} written to {out}", markup=False,
                      highlight=False)
    if register is not None:
        assert exp is not None  # refused above
        done = register_winner(loaded, chosen, Where(url, exp.tracking_uri, exp.work_dir, exp.qdrant),
                               register, promote=promote, force=force)
        alias = CHAMPION if promote else CHALLENGER
        aliases = f"{CHALLENGER}, {CHAMPION}" if promote else CHALLENGER
        console.print(f"trial #{chosen.number}{score} registered as {done.uri} ({aliases}), logged on run "
                      f"{done.run_id}\n  index: {done.index}\n  embedding model: {done.embedder}\n"
                      f"  prompt: {done.prompt}\n"
                      f"  serve it with: {serve_line(exp.tracking_uri, f'models:/{done.name}@{alias}')}",
                      markup=False, highlight=False)
    loss = held_out_loss(loaded, chosen.number)
    if loss is not None and (trial is None or promote):
        runner_up, why = loss
        advice = "promoted anyway (--force)" if promote else f"to export it instead: --trial {runner_up}"
        console.print(f"warning: {why}; {advice}", style="yellow", markup=False, highlight=False)


def serve_line(tracking_uri: str, model: str) -> str:
    """The command that serves ``model`` from the store it was registered in, wherever it is run: the
    store's URI (scrubbed of credentials) given as MLflow's own variable."""
    import shlex

    from composer.redact import scrub_url

    return f"MLFLOW_TRACKING_URI={shlex.quote(scrub_url(tracking_uri))} composer serve {model}"
