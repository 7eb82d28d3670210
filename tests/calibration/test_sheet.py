"""`composer label`: a sheet of a study's answers to label, drawn across trials and the judge's scores; its
CSV, once labelled, is a labels file that `composer judges check` reads; its HTML shows each text in its
own direction. Bad input is one line and exit 2."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fake_llm_server import ChatRequest, FakeLLMServer, Reply
from sample_study import SAMPLE, write_experiment
from scripted_llm import ScriptedRAG, golds_of, kind_of
from typer.testing import CliRunner

from composer.calibration.sheet import LabellingSheet, SheetRow, labelling_sheet
from composer.cli.app import app
from composer.judges.labels import load_labels, plain_cell
from composer.study.experiment import load_experiment

GENERATING = {"retrieval.mode": {"choices": ["bm25"]}, "retrieval.k": {"choices": [3]},
              "generation.template": {"choices": ["concise", "grounded"]}}


@dataclass
class GradedRAG(ScriptedRAG):
    """The scripted RAG whose faithfulness judge fails about half the answers (by a hash of what it is
    shown: the same answer and passages get the same verdict), so the study's answers score 0 and 1."""

    def __call__(self, req: ChatRequest) -> Reply | str:
        if kind_of(req) == "faithfulness":
            verdict = hashlib.sha256(req.prompt.encode()).digest()[0] % 2
            return json.dumps({"verdicts": [verdict] * 30, "reason": "r"})
        return super().__call__(req)


@pytest.fixture(scope="module")
def judged_study(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """Two trials (two answer templates) of six questions, judged for faithfulness; the server stays up
    for the labels' check."""
    root = tmp_path_factory.mktemp("judged")
    golds = golds_of(SAMPLE / "questions.jsonl")
    with FakeLLMServer(GradedRAG(golds)) as server:
        exp_file = write_experiment(
            root, dims=GENERATING, n_questions=6, name="graded", sampler={"name": "grid", "seed": None},
            objective={"k": 3, "metrics": {"recall": 1, "faithfulness": 1}},
            llm={"model": "openai/fake", "api_base": server.url, "timeout": 5},
            judge={"metrics": ["faithfulness"]},
        )
        optimized = CliRunner().invoke(app, ["optimize", str(exp_file)])
        assert optimized.exit_code == 0, optimized.output
        yield exp_file, server.url


@pytest.mark.slow
def test_the_sheet_spreads_over_trials_and_scores_and_reads_back_as_labels(
    judged_study: tuple[Path, str], tmp_path: Path
) -> None:
    exp_file, url = judged_study
    out = tmp_path / "sheet"
    result = CliRunner().invoke(app, ["label", "graded", "-e", str(exp_file), "--n", "8", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "8 answers from 2 trials to label for faithfulness" in " ".join(result.output.split())
    assert result.output.count("#/experiments/") == 2 and "/traces" in result.output

    text = (out / "labels.csv").read_text(encoding="utf-8-sig")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 8 and {r["trial"] for r in rows} == {"0", "1"}
    scores = {float(r["judge_score"]) for r in rows}
    assert scores == {0.0, 1.0}  # bad and good answers both drawn
    assert all(r["label"] == "" and r["metric"] == "faithfulness" for r in rows)
    assert len({r["id"] for r in rows}) == 8 and all("@" in r["id"] for r in rows)
    assert all(1 <= len(json.loads(r["contexts"])) <= 3 for r in rows)  # the passages the answer was given
    assert all(r["reference_answer"] for r in rows)

    for r in rows:
        r["label"] = str(int(float(r["judge_score"]) >= 0.5))
    filled = tmp_path / "filled.csv"
    with filled.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    labels = load_labels(filled)
    assert [(lb.id, lb.question, lb.answer, list(lb.contexts), lb.label) for lb in labels] == [
        (r["id"], plain_cell(r["question"]), plain_cell(r["answer"]), json.loads(r["contexts"]),
         int(r["label"])) for r in rows]  # an ARCD question's "- " is written "'- " (no formula), read back
    checked = CliRunner().invoke(app, ["judges", "check", str(filled), "--judge", "openai/fake",
                                       "--llm-base", url, "--workdir", str(tmp_path / "w"), "--json"])
    assert checked.exit_code == 0, checked.output
    agreement = json.loads(checked.stdout)["metrics"]["faithfulness"]
    assert agreement["n"] == 8 and agreement["accuracy"] == 1.0  # the same judge, labelled as it scored

    page = (out / "labels.html").read_text(encoding="utf-8")
    assert page.count('<dd dir="auto" class="answer">') == 8 and "<script" not in page


@pytest.mark.slow
def test_one_trials_sheet_and_the_python_twin_agree(judged_study: tuple[Path, str], tmp_path: Path) -> None:
    exp_file, _ = judged_study
    sheet = labelling_sheet(load_experiment(exp_file), trial=1, n=60)
    assert {r.trial for r in sheet.rows} == {1} and len(sheet.rows) == 6  # every answer of the trial
    assert list(sheet.runs) == [1] and sheet.missing_contexts == 0
    again = labelling_sheet(load_experiment(exp_file), trial=1, n=60)
    assert again.to_csv() == sheet.to_csv()  # the same seed draws the same sheet
    result = CliRunner().invoke(app, ["label", "-e", str(exp_file), "--trial", "7"])
    assert result.exit_code == 2 and result.output.startswith("error:") and result.output.count("\n") == 1
    assert "no trial 7 in study 'graded' (trials: 0-1)" in result.output


@pytest.mark.slow
def test_passages_mlflow_lacks_are_read_from_the_saved_index_or_the_sheet_says_why(
    judged_study: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    exp_file, _ = judged_study
    download = MlflowClient.download_artifacts

    def no_chunks(self: MlflowClient, run_id: str, path: str, dst_path: str | None = None) -> str:
        if path.startswith("chunks/"):  # a study run that holds no texts of its index
            raise MlflowException(f"no artifact {path}")
        return download(self, run_id, path, dst_path)

    monkeypatch.setattr(MlflowClient, "download_artifacts", no_chunks)
    sheet = labelling_sheet(load_experiment(exp_file), trial=1, n=60)
    assert sheet.missing_contexts == 0 and all(1 <= len(r.contexts) <= 3 for r in sheet.rows)

    monkeypatch.setattr("composer.pipeline.saved.SAVED_DIR", "no-such-folder")  # the index removed too
    result = CliRunner().invoke(app, ["label", "-e", str(exp_file), "--trial", "1", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "warning: 6 answers lack some of their passages and `composer judges check` refuses" in said
    assert "rebuild the index" in said and "fill in the contexts column" in said


def test_the_page_escapes_every_text_and_sets_each_ones_direction() -> None:
    row = SheetRow("q1@0", "ما <script>alert(1)</script>؟", "English & <b>", ("مقطع",), "مرجع",
                   "faithfulness", 0, 0.5)
    page = LabellingSheet("s", "faithfulness", [row], "1", {0: "r"}).to_html()
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "English &amp; &lt;b&gt;" in page
    assert page.count('dir="auto"') == 4  # question, answer, reference, the passage


def test_a_row_without_passages_reads_back_as_a_label_with_none() -> None:
    """An answer whose passages MLflow does not hold (its index's texts were not logged) is still
    labelled: an empty list in the CSV, "none" on the page, and the labels file reads it."""
    row = SheetRow("q1@3", "سؤال؟", "جواب", (), None, "faithfulness", 3, None)
    sheet = LabellingSheet("s", "faithfulness", [row], "1", {3: "r"}, missing_contexts=1)
    table = list(csv.DictReader(io.StringIO(sheet.to_csv().lstrip("\ufeff"))))
    assert table == [{"id": "q1@3", "question": "سؤال؟", "answer": "جواب", "contexts": "[]",
                      "reference_answer": "", "metric": "faithfulness", "label": "", "rationale": "",
                      "trial": "3", "judge_score": ""}]
    page = sheet.to_html()
    assert "<dt>passages</dt><dd><ol><li>none</li></ol></dd>" in page
    assert "reference answer" not in page and "faithfulness none" in page


@pytest.mark.slow
def test_without_a_judge_or_without_answers(tmp_path: Path) -> None:
    """Extractive answers, no judge: the sheet has no scores (the trials answer alike: each answer is drawn
    once). A study that answers nothing (a retrieval-only objective) has nothing to label."""
    (tmp_path / "x").mkdir()
    (tmp_path / "r").mkdir()
    answers = {"k": 3, "metrics": {"recall": 1, "token_f1": 1}}
    extractive = write_experiment(tmp_path / "x", n_questions=6, name="x", objective=answers, n_trials=1)
    assert CliRunner().invoke(app, ["optimize", str(extractive)]).exit_code == 0
    sheet = labelling_sheet(load_experiment(extractive), n=10)
    pairs = [(r.question, r.answer) for r in sheet.rows]
    assert len({q for q, _ in pairs}) == 6 and len(set(pairs)) == len(pairs)  # an answer twice: once
    assert {r.judge_score for r in sheet.rows} == {None} and sheet.metric == "faithfulness"

    retrieval = write_experiment(tmp_path / "r", n_questions=6, name="r", n_trials=1,
                                 objective={"k": 3, "metrics": {"recall": 1}})
    assert CliRunner().invoke(app, ["optimize", str(retrieval)]).exit_code == 0
    for args, message in (
        (["--trial", "0"], "trial 0 of study 'r' has no answers to label"),
        ([], "no trial of study 'r' has answers to label"),
        (["nosuch"], "no study 'nosuch'"),
    ):
        result = CliRunner().invoke(app, ["label", "-e", str(retrieval), *args])
        assert result.exit_code == 2, result.output
        assert message in " ".join(result.output.split()) and "Traceback" not in result.output
