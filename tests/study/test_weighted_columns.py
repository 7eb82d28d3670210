"""The tables show the metrics that carry the objective's weight, by their names: the judged
``answer_correctness`` and ``faithfulness`` with a judge (not the stand-ins it also reports), in the
`composer trials` table and CSV and in each trial's line of the live view."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import optuna
from rich.console import Console
from typer.testing import CliRunner

from composer.cli.app import app
from composer.record import TrialRecord
from composer.study._storage import make_storage
from composer.study.leaderboard import WEIGHTS_ATTR
from composer.study.live import StudyProgress

JUDGED = {"recall@5": 0.5, "answer_correctness": 0.3, "faithfulness": 0.2}
METRICS = {"recall@5": 0.8, "ndcg@5": 0.61, "answer_correctness": 0.7, "faithfulness": 0.9,
           "token_f1": 0.35, "faithfulness_overlap": 0.55, "llm_judge_rating": 0.6, "composite": 0.72}


def _study(url: str, attrs: dict[str, Any]) -> optuna.Study:
    study = optuna.create_study(storage=make_storage(url), study_name="judged", direction="maximize")
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    record = TrialRecord({"k": 5}, "h0", metrics=METRICS)
    study.add_trial(optuna.trial.create_trial(
        params={"k": 5}, distributions={"k": optuna.distributions.IntDistribution(1, 10)}, value=0.72,
        user_attrs={"composer": record.to_dict()}))
    return study


def _trials(url: str, *extra: str) -> str:
    result = CliRunner().invoke(app, ["trials", "judged", "--storage", url, *extra])
    assert result.exit_code == 0, result.output
    return result.output


def test_trials_shows_the_judged_metrics_that_carry_the_weight(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    _study(url, {WEIGHTS_ATTR: JUDGED, "composer": {"k_eval": 5}})
    table = _trials(url)
    header = next(line for line in table.splitlines() if "objective" in line)
    assert header.split()[:6] == ["trial", "state", "objective", "R@5", "answer_correctness", "faithfulness"]
    assert "F1" not in header and "faithful " not in header and "ndcg@5" not in header
    (row,) = csv.DictReader(io.StringIO(_trials(url, "--csv")))
    assert [c for c in row if c in METRICS] == ["composite", *JUDGED]
    assert float(row["answer_correctness"]) == 0.7


def test_a_study_that_recorded_no_weights_shows_the_default_objectives_metrics(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    _study(url, {"composer": {"k_eval": 5}})
    (row,) = csv.DictReader(io.StringIO(_trials(url, "--csv")))
    assert [c for c in row if c in METRICS] == ["composite", "recall@5", "ndcg@5", "token_f1",
                                                "faithfulness_overlap"]


def test_a_trials_line_names_its_weighted_metrics(tmp_path: Path) -> None:
    study = _study(f"sqlite:///{tmp_path / 'optuna.db'}", {WEIGHTS_ATTR: JUDGED})
    out = io.StringIO()
    progress = StudyProgress(Console(file=out, width=200), target=2, done=0)
    trials = study.get_trials(deepcopy=False)
    progress(study, trials[0], trials)
    line = out.getvalue()
    assert "R@5 0.800 answer_correctness 0.700 faithfulness 0.900  k=5" in line
    assert "F1" not in line and "0.350" not in line
