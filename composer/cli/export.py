"""`composer export`: write a study's best pipeline as YAML (for `composer eval --config`) or a script."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import typer

from composer.cli.options import EXPERIMENT, STORAGE, STUDY


def export_command(
    study: str | None = STUDY,
    out: Path = typer.Option(..., "--out", "-o", help="File to write (best.yaml, best.py)."),
    fmt: Literal["yaml", "python"] = typer.Option(
        "yaml", "--format", help="yaml: pipeline + scores + provenance; python: a runnable script."
    ),
    trial: int | None = typer.Option(None, "--trial", help="Export this trial instead of the best one."),
    experiment: Path | None = EXPERIMENT,
    storage: str | None = STORAGE,
) -> None:
    """Export the best trial's self-contained pipeline config, its scores and provenance."""
    from composer.console import make_console
    from composer.record import TrialRecord
    from composer.study._storage import load_study
    from composer.study.experiment import locate_study
    from composer.study.export import best_trial, export_document, write_export

    name, url, _ = locate_study(study, experiment, storage)
    loaded = load_study(name, url)
    chosen = best_trial(loaded, trial)
    write_export(export_document(loaded, chosen, url), out, fmt)
    record = TrialRecord.of(chosen)
    composite = record.composite if record is not None else None
    score = f" (composite {composite:.4f})" if composite is not None else ""
    console = make_console(stderr=True, soft_wrap=True)
    console.print(f"trial #{chosen.number}{score} of study {name} written to {out}", markup=False,
                  highlight=False)
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
