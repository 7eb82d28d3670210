"""`composer report` on a study of conversations shows the winner's scores by turn, with their intervals
over conversations; a study of lone questions shows no such section."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from composer.cli.app import app

ROOT = Path(__file__).resolve().parents[2]


def _study(tmp_path: Path, questions: str) -> str:
    for name in ("arcd-sample", "arcd-conversations"):
        shutil.copytree(ROOT / "examples" / name, tmp_path / "examples" / name)
    (tmp_path / "space.yaml").write_text(
        "defaults: {retrieval: {mode: bm25, k: 5}}\n"
        "dimensions:\n  conversation.rewrite: {choices: [none, concat]}\n", encoding="utf-8")
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        f"name: turns\ncorpus: examples/arcd-sample/corpus.jsonl\nquestions: {questions}\n"
        "search_space: space.yaml\nworkdir: work\nobjective: {k: 5, metrics: {recall: 1}}\n"
        "sampler: grid\nn_trials: 2\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["optimize", str(exp)])
    assert result.exit_code == 0, result.output
    out = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["report", "-e", str(exp), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8")


def test_the_report_shows_the_winners_scores_by_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    page = _study(tmp_path, "examples/arcd-conversations/questions.jsonl")
    section = page.split("The winner's scores by turn</h2>")[1].split("<h2>")[0]
    assert "resamples whole conversations" in section
    for view in ("first_turn", "follow_up", "turn_2", "conversation"):
        assert f"<td>{view}</td>" in section
    assert "<th>recall@5</th>" in section and "<th>all_found@5</th>" in section


def test_a_study_of_lone_questions_has_no_such_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    page = _study(tmp_path, "examples/arcd-sample/questions.jsonl")
    assert "scores by turn" not in page
