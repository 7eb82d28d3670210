"""Labels that cannot be checked honestly are refused in one line (exit 2): faithfulness labels without
their passages, a scale guessed from one stray value, a misspelt column. The sheet's CSV runs no formula
in a spreadsheet and reads back as written; a label the judge left unscored is said, not only counted."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from fake_llm_server import ChatRequest, FakeLLMServer, Reply
from typer.testing import CliRunner

from composer.calibration.sheet import LabellingSheet, SheetRow
from composer.cli.app import app
from composer.judges.labels import csv_cell, load_labels, plain_cell

UNREACHABLE = "http://127.0.0.1:9/v1"  # nothing is sent: every refusal comes before the first call


def _csv(path: Path, header: str, rows: list[str]) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def _check(labels: Path, tmp_path: Path, base: str = UNREACHABLE) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["judges", "check", str(labels), "--judge", "openai/fake",
                                      "--llm-base", base, "--workdir", str(tmp_path / "work")])
    return result.exit_code, result.output


def test_faithfulness_labels_without_passages_are_refused_with_their_count_and_lines(tmp_path: Path) -> None:
    header = "id,question,answer,contexts,metric,label"
    rows = [f'q{i},س{i}؟,ج{i},[],faithfulness,{i % 2}' for i in range(3)]
    rows.append('q9,س؟,ج,"[""مقطع""]",faithfulness,1')  # this one has its passage
    code, output = _check(_csv(tmp_path / "labels.csv", header, rows), tmp_path)
    assert code == 2 and output.startswith("error:") and output.count("\n") == 1, output
    assert "labels.csv:2 (field 'contexts')" in output
    assert "3 faithfulness labels without passages (lines 2, 3, 4)" in output
    assert "Traceback" not in output


@pytest.mark.parametrize(
    ("labels", "line", "words"),
    [
        ((0, 1, 1, 2, 0, 1), 5, "mix 0/1 (pass/fail) with 1-5 ratings (label 2)"),  # the one stray 2
        ((1, 1, 2, 1), 4, "only 1 and 2"),  # no 0 to tell: pass/fail with a slip, or ratings?
    ],
)
def test_a_stray_rating_never_switches_the_scale(
    tmp_path: Path, labels: tuple[int, ...], line: int, words: str
) -> None:
    rows = [f'q{i},س؟,ج,"[""مقطع""]",faithfulness,{v}' for i, v in enumerate(labels)]
    code, output = _check(_csv(tmp_path / "labels.csv", "id,question,answer,contexts,metric,label", rows),
                          tmp_path)
    assert code == 2 and output.count("\n") == 1, output
    assert f"labels.csv:{line} (field 'label')" in output and words in output


def test_ratings_on_the_whole_scale_stay_ratings(tmp_path: Path) -> None:
    rows = [f'q{i},س؟,ج,"[""مقطع""]",faithfulness,{v}' for i, v in enumerate((1, 2, 4, 5))]
    found = load_labels(_csv(tmp_path / "labels.csv", "id,question,answer,contexts,metric,label", rows))
    assert [lb.label for lb in found] == [1, 2, 4, 5]


def test_a_misspelt_column_is_named_with_the_closest_known_one(tmp_path: Path) -> None:
    path = _csv(tmp_path / "labels.csv", "id,question,answer,contexts,metric,lable,trial,judge_score",
                ['q1,س؟,ج,"[""مقطع""]",faithfulness,1,0,0.5'])
    code, output = _check(path, tmp_path)
    assert code == 2 and output.count("\n") == 1, output
    assert "unknown column 'lable' (did you mean 'label'?)" in output and "labels.csv:2" in output
    jsonl = tmp_path / "labels.jsonl"
    jsonl.write_text(json.dumps({"id": "q1", "question": "س؟", "answer": "ج", "contexts": ["م"],
                                 "metric": "faithfulness", "label": 1, "ratoinale": "x"}) + "\n")
    code, output = _check(jsonl, tmp_path)
    assert code == 2 and "unknown column 'ratoinale' (did you mean 'rationale'?)" in output


def test_the_sheet_runs_no_formula_and_reads_back_as_written(tmp_path: Path) -> None:
    texts = ["- من هو جمال خاشقجي؟", "=HYPERLINK(\"http://x\",\"y\")", "+1", "@SUM(A1)", "'=quoted", "'Twas"]
    rows = [SheetRow(f"q{i}@0", t, f"جواب {t}" if i % 2 else t, (t,), t, "faithfulness", 0, 0.5)
            for i, t in enumerate(texts)]
    text = LabellingSheet("s", "faithfulness", rows, "1", {0: "r"}).to_csv()
    cells = [c for row in csv.reader(io.StringIO(text.lstrip("\ufeff"))) for c in row]
    assert not any(c.startswith(("=", "+", "-", "@")) for c in cells)
    assert "'- من هو جمال خاشقجي؟" in cells

    filled = [r for r in csv.DictReader(io.StringIO(text.lstrip("\ufeff")))]
    for r in filled:
        r["label"] = "1"
    path = tmp_path / "filled.csv"
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(filled[0]))
        writer.writeheader()
        writer.writerows(filled)
    found = load_labels(path)
    assert [(lb.question, lb.answer, lb.contexts, lb.reference_answer) for lb in found] == [
        (r.question, r.answer, r.contexts, r.reference_answer) for r in rows]
    assert [plain_cell(csv_cell(t)) for t in texts] == texts


def test_a_label_the_judge_left_unscored_is_reported(tmp_path: Path) -> None:
    def route(req: ChatRequest) -> Reply | str:
        if "BROKEN" in req.prompt:
            return Reply("refused", status=400)  # not retried: the judge has no verdict
        if '"statements"' in req.system:
            return json.dumps({"statements": ["عبارة"]})
        return json.dumps({"verdicts": [1], "reason": "مدعوم"})

    rows = [f'q{i},س{i}؟,{"BROKEN" if i == 2 else "ج"},"[""مقطع""]",faithfulness,{i % 2}' for i in range(4)]
    path = _csv(tmp_path / "labels.csv", "id,question,answer,contexts,metric,label", rows)
    with FakeLLMServer(route) as server:
        code, output = _check(path, tmp_path, server.url)
    assert code == 0, output
    said = " ".join(output.split())
    assert "faithfulness: 3 of 4 labels used; left out: 1 the judge failed (other) (first: q2:" in said
