"""`composer export`: write a study's best pipeline as YAML (for `composer eval --config`) or a script."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import typer

from composer.cli.options import ALLOW_ENV, EXPERIMENT, STORAGE, STUDY


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
    promote: bool = typer.Option(False, "--promote", help="With --register: move the champion alias to it."),
    allow_env: list[str] | None = ALLOW_ENV,
) -> None:
    """Export the best trial's self-contained pipeline config, its scores and provenance; or register it
    as an MLflow model."""
    from composer.console import make_console
    from composer.errors import InputError
    from composer.record import TrialRecord
    from composer.study._storage import load_study
    from composer.study.experiment import locate_study
    from composer.study.export import best_trial, export_document, write_export
    from composer.study.registry import Where, check_name, register_winner

    if out is None and register is None:
        raise InputError("say where: --out FILE, or --register NAME", field="out")
    if promote and register is None:
        raise InputError("--promote moves the champion alias of a model: add --register NAME",
                         field="promote")
    if register is not None:
        check_name(register)
    name, url, exp = locate_study(study, experiment, storage)
    loaded = load_study(name, url)
    chosen = best_trial(loaded, trial)
    record = TrialRecord.of(chosen)
    composite = record.composite if record is not None else None
    score = f" (composite {composite:.4f})" if composite is not None else ""
    console = make_console(stderr=True, soft_wrap=True)
    if out is not None:
        write_export(export_document(loaded, chosen, url), out, fmt)
        console.print(f"trial #{chosen.number}{score} of study {name} written to {out}", markup=False,
                      highlight=False)
    if register is not None:
        if exp is None:
            raise InputError("--register needs --experiment EXPERIMENT.yaml (its MLflow store and work dir)",
                             field="experiment")
        done = register_winner(loaded, chosen, Where(url, exp.tracking_uri, exp.work_dir, exp.qdrant),
                               register, promote=promote)
        aliases = "challenger, champion" if promote else "challenger"
        console.print(f"trial #{chosen.number}{score} registered as {done.uri} ({aliases}), logged on run "
                      f"{done.run_id}\n  index: {done.index}\n  embedding model: {done.embedder}",
                      markup=False, highlight=False)
    if trial is None:
        warning = runner_up_warning(loaded.user_attrs.get("held_out"), chosen.number)
        if warning:
            console.print(f"warning: {warning}", style="yellow", markup=False, highlight=False)


def runner_up_warning(stored: Any, winner: int) -> str | None:
    """What to say when the held-out re-score (``stored``: the study's ``held_out`` user attribute) found
    the runner-up really better than the exported winner (the winner was chosen on the selection set; the
    held-out questions are the fairer judge)."""
    from composer.tracking.summary import HeldOut

    held = HeldOut.from_dict(stored)
    if held is None or held.difference is None or held.winner is None or held.runner_up is None:
        return None
    d = held.difference
    if not d.runner_up_really_better or held.winner.trial != winner:
        return None
    runner_up = held.runner_up.trial
    low, high = d.ci95
    return (f"on the {held.n_questions} held-out questions the runner-up #{runner_up} is really better "
            f"than the winner #{winner} (difference {d.mean:+.4f}, 95% CI [{low:+.4f}, {high:+.4f}]); "
            f"to export it instead: --trial {runner_up}")
