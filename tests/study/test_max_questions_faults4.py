"""A smoke study without a hand-made subset file (issue 42): ``max_questions`` (and ``optimize
--max-questions``) picks N questions, each stratum (answerable or not, language) keeping its share, the
same ones under the same seed, and ``eval --split`` on the export reads back the same subset."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from collections import Counter
from pathlib import Path

import yaml
from sample_study import write_experiment
from typer.testing import CliRunner

from composer.cli.app import app
from composer.data.types import Question, QuestionSet
from composer.evaluation.splits import stratified_pick, study_split
from composer.study.experiment import load_experiment


def _mixed() -> QuestionSet:
    """30 answerable Arabic questions, 10 unanswerable Arabic ones and 10 answerable English ones."""
    rows = [Question(f"ar{i}", "ما هي عاصمة مصر في التاريخ؟", relevant_ids=("d1",)) for i in range(30)]
    rows += [Question(f"no{i}", "من كتب هذه الرواية الطويلة؟") for i in range(10)]
    rows += [Question(f"en{i}", "What is the capital of Egypt?", answers=("Cairo",)) for i in range(10)]
    return QuestionSet(rows, "mixed.jsonl")


def _strata(questions: QuestionSet) -> Counter[str]:
    return Counter(q.id.rstrip("0123456789") for q in questions)


def test_the_pick_keeps_each_stratum_share_and_the_file_order() -> None:
    questions = _mixed()
    picked = stratified_pick(questions, 10, seed=0)
    assert _strata(picked) == {"ar": 6, "no": 2, "en": 2}
    order = [q.id for q in questions]
    assert [q.id for q in picked] == sorted((q.id for q in picked), key=order.index)
    assert [q.id for q in stratified_pick(questions, 10, seed=0)] == [q.id for q in picked]
    assert [q.id for q in stratified_pick(questions, 10, seed=1)] != [q.id for q in picked]
    assert stratified_pick(questions, 50, seed=0) is questions


def test_a_small_pick_still_holds_every_stratum() -> None:
    """Three questions of 50: the two small strata are not rounded away."""
    assert _strata(stratified_pick(_mixed(), 3, seed=0)) == {"ar": 1, "no": 1, "en": 1}


def test_optimize_max_questions_runs_the_study_on_the_pick_and_eval_reads_it_back(tmp_path: Path) -> None:
    exp_file = write_experiment(tmp_path, n_questions=20, max_questions=12,
                                split={"held_out": 0.25, "seed": 3}, n_trials=1)
    assert load_experiment(exp_file).max_questions == 12
    done = CliRunner().invoke(app, ["optimize", str(exp_file), "--max-questions", "8"])
    assert done.exit_code == 0, done.output
    assert "6 questions (+2 held out)" in done.output  # the option wins over the file's 12
    out = tmp_path / "best.yaml"
    exported = CliRunner().invoke(app, ["export", "s", "-e", str(exp_file), "--out", str(out)])
    assert exported.exit_code == 0, exported.output
    provenance = yaml.safe_load(out.read_text(encoding="utf-8"))["provenance"]
    assert provenance["max_questions"] == 8
    from composer.data import load_questions

    questions = load_questions(tmp_path / "questions.jsonl")
    selection = study_split(questions, out, "selection")
    assert len(selection) == 6 and selection.fingerprint() == provenance["selection_fingerprint"]
    assert len(study_split(questions, out, "held_out")) == 2
