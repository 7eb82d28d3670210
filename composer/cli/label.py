"""`composer label`: a sheet of a study's answers for people to label (CSV to fill in, HTML to read), so
the judge can be checked against them; `composer judges labels` collects labels given in MLflow."""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import typer

from composer.cli.options import EXPERIMENT, STORAGE, STUDY


def label_command(
    study: str | None = STUDY,
    experiment: Path | None = EXPERIMENT,
    storage: str | None = STORAGE,
    trial: int | None = typer.Option(None, "--trial", min=0, help="Draw the answers from this trial only."),
    n: int = typer.Option(60, "--n", min=1, help="How many answers to label."),
    metric: str | None = typer.Option(
        None, "--metric", help="The judged metric to label (default: the judge's first, else faithfulness)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the draw (the same seed draws the same sheet)."),
    out: Path | None = typer.Option(
        None, "--out", help="Folder for labels.csv and labels.html (default: <workdir>/<study>-labels)."
    ),
    ui_url: str | None = typer.Option(
        None, "--ui-url", help="MLflow UI the trace links point to (default: as `composer report`)."
    ),
) -> None:
    """Write a labelling sheet: answers drawn across the study's trials (best to worst) and the judge's
    scores (bad, middling, good), or from one trial, as labels.csv (fill in its label column; then it is a
    labels file for `composer judges check`) and labels.html (each text in its own direction); prints the
    MLflow UI links to the trials' traces, for labelling there instead."""
    from composer.calibration.sheet import labelling_sheet
    from composer.cli.report import ui_base
    from composer.errors import ConfigError
    from composer.judges.labels import PASSAGE_METRICS
    from composer.pipeline.saved import SAVED_DIR
    from composer.study.experiment import locate_study

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # a bar per artifact read
    name, url, exp = locate_study(study, experiment, storage)
    if exp is None:
        raise ConfigError("give --experiment EXPERIMENT.yaml: the sheet reads its MLflow store",
                          field="experiment")
    base = ui_base(exp.tracking_uri, ui_url)
    sheet = labelling_sheet(exp, name, storage=url, trial=trial, n=n, metric=metric, seed=seed)
    table, page = sheet.save(out or exp.work_dir / f"{name}-labels")
    trials = len(sheet.runs)
    typer.echo(f"{len(sheet.rows)} answers from {trials} trial{'s' * (trials != 1)} to label for "
               f"{sheet.metric}: fill in the label column of {table} (read them in {page})")
    if sheet.missing_contexts:
        refused = (" and `composer judges check` refuses such labels" if sheet.metric in PASSAGE_METRICS
                   else "")
        typer.echo(f"warning: {sheet.missing_contexts} answers lack some of their passages{refused}: neither "
                   f"the study's MLflow run nor the saved index under {exp.work_dir / SAVED_DIR}"
                   f"{' nor the Qdrant server' if (exp.qdrant or '').startswith('http') else ''} holds their "
                   "texts (removed since the study?): rebuild the index (`composer eval` with the trial's "
                   "config builds it) and write the sheet again, or fill in the contexts column",
                   err=True)
    typer.echo("or label in the MLflow UI (feedback named after the metric; then `composer judges labels`):")
    for number, run_id in sheet.runs.items():
        typer.echo(f"  trial {number}: {traces_url(base, sheet.experiment_id, run_id)}")


def traces_url(base: str, experiment_id: str, run_id: str) -> str:
    """The traces tab of a trial's run in the MLflow UI: one trace per question, its metrics as feedback."""
    quote = urllib.parse.quote
    return f"{base}/#/experiments/{quote(experiment_id)}/runs/{quote(run_id)}/traces"
