"""`composer label`: collect human labels into one labels file for `composer judges check|tune`: from the
feedback people gave on a study's traces in the MLflow UI, or from a labels file (checked, questions
filled in by id)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from composer.cli.options import WORKDIR
from composer.errors import InputError

if TYPE_CHECKING:
    from composer.judges.labels import Label


def label_command(
    out: Path = typer.Argument(..., help="Labels file to write (JSON Lines)."),
    experiment: str | None = typer.Option(
        None,
        "--experiment",
        help="MLflow experiment whose traces carry human feedback (source HUMAN) named "
        "after a judged metric (faithfulness, answer_correctness, llm_judge_rating...).",
    ),
    tracking_uri: str | None = typer.Option(
        None, "--tracking-uri", help="MLflow tracking URI (default: sqlite:///<workdir>/mlflow.db)."
    ),
    labels: Path | None = typer.Option(None, "--labels", help="A labels file to check and complete instead."),
    questions: Path | None = typer.Option(
        None, "--questions", help="Question set that fills each label's question and reference_answer by id."
    ),
    workdir: Path = WORKDIR,
) -> None:
    """Write a labels file (one labelled answer per line) from MLflow human feedback or a labels file."""
    from composer.cli.judges import read_labels
    from composer.files import write_atomic
    from composer.judges.labels import labels_from_mlflow

    if (experiment is None) == (labels is None):
        raise InputError("give exactly one of --experiment NAME (MLflow feedback) or --labels FILE")
    found: list[Label]
    if experiment is not None:
        uri = tracking_uri or f"sqlite:///{workdir.resolve()}/mlflow.db"
        found = labels_from_mlflow(uri, experiment)
        if not found:
            raise InputError(
                f"no human feedback named after a judged metric on the traces of {experiment!r}",
                field="experiment",
            )
    else:
        assert labels is not None
        found = read_labels(labels, questions)
    lines = [json.dumps(label_row(lb), ensure_ascii=False) for lb in found]
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, "\n".join(lines) + "\n")
    counts = ", ".join(f"{m} {n}" for m, n in Counter(lb.metric for lb in found).most_common())
    typer.echo(f"{len(found)} labels written to {out} ({counts})")


def label_row(label: Label) -> dict[str, object]:
    """A label as a row of the labels file (what ``load_labels`` reads back)."""
    row: dict[str, object] = {
        "id": label.id,
        "question": label.question,
        "answer": label.answer,
        "contexts": list(label.contexts),
        "reference_answer": label.reference_answer,
        "metric": label.metric,
        "label": label.label,
        "rationale": label.rationale,
    }
    return {k: v for k, v in row.items() if v is not None}
