"""`composer report`: one self-contained HTML page of a study, to read or send without an MLflow server."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from composer.cli.options import EXPERIMENT, STORAGE

if TYPE_CHECKING:
    import optuna
    import pandas as pd

    from composer.study.experiment import ExperimentConfig

WORST = 10
"""How many of the winner's questions the page lists, worst first."""


def report_command(
    study: str | None = typer.Argument(None, help="Study name (default: the experiment's name)."),
    experiment: Path | None = EXPERIMENT,
    storage: str | None = STORAGE,
    out: Path | None = typer.Option(
        None, "--out", help="HTML file to write (default: <workdir>/<study>-report.html)."
    ),
) -> None:
    """Write the study's leaderboard, optimization history, parameter importances and the winner's worst
    questions as one HTML page (images inline, no scripts)."""
    from composer.errors import ConfigError
    from composer.files import write_atomic
    from composer.study.experiment import locate_study
    from composer.study.study import load_study

    name, url, exp = locate_study(study, experiment, storage)
    if exp is None:
        raise ConfigError("give --experiment EXPERIMENT.yaml: the page needs its objective and MLflow store",
                          field="experiment")
    page = render_report(load_study(name, url), exp)
    target = out or exp.work_dir / f"{name}-report.html"
    write_atomic(target, page)
    typer.echo(f"report: {target}")


def render_report(study: optuna.Study, exp: ExperimentConfig) -> str:
    """The page's HTML: every value escaped, the charts as inline PNG."""
    from composer.study import _report
    from composer.study.leaderboard import leaderboard

    board = leaderboard(study)
    charts = _report.plots(study, exp)
    best = None if board.empty or board.iloc[0]["state"] != "COMPLETE" else int(board.iloc[0]["trial"])
    weights = dict(study.user_attrs.get("objective_weights", {}))
    title = f"Composer study {study.study_name}"
    headline = "none" if best is None else f"trial #{best}, composite {float(board.iloc[0]['composite']):.4f}"
    parts = [
        f"<h1>{html.escape(title)}</h1>",
        f"<p>{len(board)} finished trials; best: {headline}"
        + f". Objective weights: {html.escape(', '.join(f'{k} {w:.2f}' for k, w in weights.items()))}.</p>",
        "<h2>Leaderboard</h2>",
        board.drop(columns=["index_key"]).to_html(index=False, na_rep="", float_format="{:.4f}".format),
    ]
    for key, heading in (("optimization_history", "Optimization history"),
                         ("param_importances", "Parameter importances"), ("pareto_front", "Pareto front")):
        if key in charts:
            data = base64.b64encode(charts[key]).decode("ascii")
            parts += [f"<h2>{heading}</h2>", f'<img alt="{heading}" src="data:image/png;base64,{data}">']
    parts.append(f"<h2>The winner's {WORST} worst questions</h2>")
    worst = None if best is None else _worst_questions(exp, study.study_name, best, list(weights))
    parts.append(
        worst.to_html(index=False, na_rep="", float_format="{:.3f}".format, border=0)
        if worst is not None
        else "<p>No per-question table in MLflow for the winner (its run is not written, or older).</p>"
    )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
        + "\n".join(parts)
        + "</body></html>\n"
    )


def _worst_questions(
    exp: ExperimentConfig, study: str, number: int, metrics: list[str]
) -> pd.DataFrame | None:
    """The winner's per-question table from MLflow, worst first, cut to the objective's metrics."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from composer.store import sqlite_file
    from composer.tracking.runs import STUDY_TAG, TRIAL_TAG, read_question_table

    file = sqlite_file(exp.tracking_uri)
    if file is not None and not file.exists():
        return None
    client = MlflowClient(exp.tracking_uri)
    found = client.get_experiment_by_name(exp.mlflow_experiment)
    if found is None:
        return None
    wanted = f"tags.`{STUDY_TAG}` = '{study}' and tags.`{TRIAL_TAG}` = '{number}'"
    runs = client.search_runs([found.experiment_id], filter_string=wanted)
    if not runs:
        return None
    try:
        table = read_question_table(client, runs[0].info.run_id)
    except (MlflowException, OSError):  # a run written before trials had their table
        return None
    shown = [c for c in ("question", "expected_ids", "retrieved_ids", "answer", "expected_response")
             if c in table.columns]
    table = table[shown + [m for m in metrics if m in table.columns]].head(WORST).copy()
    if "retrieved_ids" in table.columns:
        table["retrieved_ids"] = [_ids(v) for v in table["retrieved_ids"]]
    if "expected_ids" in table.columns:
        table["expected_ids"] = [_ids(v) for v in table["expected_ids"]]
    return table


def _ids(value: Any) -> str:
    return ", ".join(str(v) for v in list(value)[:5]) if value is not None else ""


STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}"
    "table{border-collapse:collapse;font-size:13px}th,td{padding:4px 8px;border-bottom:1px solid #ddd;"
    "text-align:start;vertical-align:top}th{background:#f4f4f4}img{max-width:100%}"
    "td{unicode-bidi:plaintext}"
)
