"""`composer trials`: a study's leaderboard."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from composer.cli.options import EXPERIMENT, STORAGE, STUDY, flag


def trials_command(
    study: str | None = STUDY,
    experiment: Path | None = EXPERIMENT,
    storage: str | None = STORAGE,
    limit: int | None = typer.Option(None, "--limit", min=1, help="Show only the best N trials."),
    as_csv: bool = flag("--csv", "Print the leaderboard as CSV on stdout."),
) -> None:
    """Rank a study's trials by the composite objective (complete first, then pruned and failed)."""
    from composer.study.experiment import locate_study
    from composer.study.leaderboard import leaderboard, render_leaderboard, report_console
    from composer.study.study import load_study

    name, url, _ = locate_study(study, experiment, storage)
    board = leaderboard(load_study(name, url))
    if as_csv:
        sys.stdout.write((board.head(limit) if limit else board).to_csv(index=False))
        return
    table = render_leaderboard(board, title=f"study {name} ({len(board)} trials)", limit=limit)
    report_console().print(table)
