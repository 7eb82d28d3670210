"""`composer eval` end to end: bad input gives one readable line and exit 2, good input gives metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from composer.cli.app import app, expand_multi_values, user_error_message
from composer.errors import InputError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "arcd-sample"
HEAVY = ("torch", "mlflow", "litellm", "optuna", "qdrant_client", "qdrant_edge", "sentence_transformers")

CORPUS = '{"id": "d1", "text": "one"}\n{"id": "d2", "text": "two"}\n'
RUN = '{"id": "q1", "results": [{"id": "d1", "score": 2.0}, {"id": "d2", "score": 1.0}]}\n'
GOOD_Q1 = '{"id": "q1", "question": "first?", "relevant_ids": ["d1"]}\n'


@dataclass(frozen=True)
class BadInput:
    name: str
    filename: str
    content: bytes
    expected: tuple[str, ...]
    extra: tuple[str, ...] = ()


BAD_INPUTS = [
    BadInput(
        "malformed-json",
        "q.jsonl",
        (GOOD_Q1 + '{"id": "q2", "question": \n').encode(),
        ("q.jsonl:2:", "invalid JSON"),
    ),
    BadInput(
        "missing-question-text",
        "q.jsonl",
        (GOOD_Q1 + '{"id": "q2", "relevant_ids": ["d2"]}\n').encode(),
        ("q.jsonl:2 (field 'question'):", "missing question text"),
    ),
    BadInput(
        "duplicate-ids",
        "q.jsonl",
        (GOOD_Q1 + '{"id": "q1", "question": "again?", "relevant_ids": ["d2"]}\n').encode(),
        ("q.jsonl:2", "duplicate", "q1"),
    ),
    BadInput(
        "unknown-relevant-ids-strict",
        "q.jsonl",
        (GOOD_Q1 + '{"id": "q2", "question": "second?", "relevant_ids": ["d9"]}\n').encode(),
        ("q.jsonl:2 (field 'relevant_ids'):", "1 of 2 relevant ids are not in the corpus", "d9"),
        ("--strict",),
    ),
    BadInput(
        "undecodable-bytes",
        "q.jsonl",
        GOOD_Q1.encode() + b'{"id": "q2", "question": "caf\xe9?"}\n',
        ("q.jsonl:2:", "not valid UTF-8", "e9"),
    ),
    BadInput(
        "lone-surrogate",
        "q.jsonl",
        (GOOD_Q1 + '{"id": "q2", "question": "caf\\ud800?"}\n').encode(),
        ("q.jsonl:2 (field 'question'):", "invalid text (lone surrogate U+D800 at character 4)"),
    ),
    BadInput("empty-file", "q.jsonl", b"", ("q.jsonl:", "file is empty")),
    BadInput(
        "unknown-extension",
        "q.docx",
        GOOD_Q1.encode(),
        ("q.docx:", "unsupported file type '.docx'", ".jsonl"),
    ),
]


def _files(tmp_path: Path, bad: BadInput) -> list[str]:
    (tmp_path / bad.filename).write_bytes(bad.content)
    (tmp_path / "corpus.jsonl").write_text(CORPUS, encoding="utf-8")
    (tmp_path / "run.jsonl").write_text(RUN, encoding="utf-8")
    return ["eval", bad.filename, "--corpus", "corpus.jsonl", "--run", "run.jsonl", *bad.extra]


def _assert_one_error_line(stderr: str, expected: tuple[str, ...]) -> None:
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    for fragment in expected:
        assert fragment in lines[0]


@pytest.mark.parametrize("bad", BAD_INPUTS, ids=lambda b: b.name)
def test_bad_input_in_process(bad: BadInput, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, _files(tmp_path, bad))
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    _assert_one_error_line(result.stderr, bad.expected)


@pytest.mark.parametrize("bad", BAD_INPUTS, ids=lambda b: b.name)
def test_bad_input_in_a_real_process(bad: BadInput, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "composer", *_files(tmp_path, bad)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    _assert_one_error_line(proc.stderr, bad.expected)


def test_optimize_stops_before_any_trial_on_invalid_text(tmp_path: Path) -> None:
    """A lone surrogate in the corpus of an experiment: exit 2 naming file, line and field."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(CORPUS + '{"id": "d3", "title": "\\ud800", "text": "three"}\n', encoding="utf-8")
    (tmp_path / "q.jsonl").write_text(GOOD_Q1, encoding="utf-8")
    (tmp_path / "space.yaml").write_text("dimensions:\n  retrieval.k: {choices: [1, 2]}\n", encoding="utf-8")
    (tmp_path / "exp.yaml").write_text(
        "name: surrogate\ncorpus: corpus.jsonl\nquestions: q.jsonl\nsearch_space: space.yaml\n"
        "objective: {k: 1, metrics: {recall: 1}}\nn_trials: 2\n", encoding="utf-8",
    )
    proc = subprocess.run([sys.executable, "-m", "composer", "optimize", "exp.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    _assert_one_error_line(proc.stderr, ("corpus.jsonl:3 (field 'title'):", "lone surrogate U+D800"))


def test_unknown_relevant_ids_without_strict_warn_and_score(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = next(b for b in BAD_INPUTS if b.name == "unknown-relevant-ids-strict")
    monkeypatch.chdir(tmp_path)
    args = [a for a in _files(tmp_path, bad) if a != "--strict"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    assert "warning: q.jsonl: 1 of 2 relevant ids are not in the corpus" in result.stderr
    summary = json.loads(result.stdout)
    assert summary["n_questions"] == 2
    assert summary["questions_missing_from_run"] == 1  # q2 is not in the run: it retrieved nothing
    assert summary["metrics"]["hit_rate@1"] == 0.5


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["eval", "q.jsonl"], ("exactly one of", "--run", "--config")),
        (["eval", "q.jsonl", "--run", "run.jsonl", "--config", "p.yaml"], ("exactly one of",)),
        (["eval", "q.jsonl", "--config", "p.yaml"], ("no index for this config is saved under", "--corpus")),
        (["eval", "q.jsonl", "--run", "missing.jsonl"], ("missing.jsonl:", "file not found")),
        (["eval", "missing.jsonl", "--run", "run.jsonl"], ("missing.jsonl:", "file not found")),
        (["eval", "q.jsonl", "--run", "run.jsonl", "--k", "0"], ("field 'k'", "positive")),
        (["eval", "q.jsonl", "--run", "q.jsonl"], ("q.jsonl:1 (field 'results'):",)),
    ],
)
def test_other_user_errors(
    args: list[str], expected: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "q.jsonl").write_text(GOOD_Q1, encoding="utf-8")
    (tmp_path / "run.jsonl").write_text(RUN, encoding="utf-8")
    (tmp_path / "p.yaml").write_text("retrieval: {mode: bm25, k: 5}\n", encoding="utf-8")  # never indexed
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    _assert_one_error_line(result.stderr, expected)


def test_user_error_messages_and_bugs() -> None:
    import pandas as pd

    assert (
        user_error_message(InputError("bad", path="f.csv", line=3, field="id")) == "f.csv:3 (field 'id'): bad"
    )
    assert user_error_message(FileNotFoundError(2, "No such file or directory", "x.csv")) == (
        "x.csv: No such file or directory"
    )
    parse_error = pd.errors.ParserError(
        "Error tokenizing data.\nC error: Expected 2 fields in line 3, saw 4\n"
    )
    assert user_error_message(parse_error) == (
        "could not parse input: Error tokenizing data. C error: Expected 2 fields in line 3, saw 4"
    )
    assert user_error_message(FileExistsError(17, "File exists", "out")) == "out: File exists"  # --out a file
    assert user_error_message(ValueError("a bug")) is None  # bugs keep their traceback


def test_k_takes_several_values_after_one_flag() -> None:
    assert expand_multi_values(["q.jsonl", "--k", "1", "3", "10", "--json"], {"--k"}) == [
        "q.jsonl",
        "--k",
        "1",
        "--k",
        "3",
        "--k",
        "10",
        "--json",
    ]
    # A positional argument after the list stays positional; other options are untouched.
    assert expand_multi_values(["--k", "5", "q.jsonl", "--out", "7"], {"--k"}) == [
        "--k",
        "5",
        "q.jsonl",
        "--out",
        "7",
    ]


def _example_args(*extra: str) -> list[str]:
    return [
        "eval",
        str(EXAMPLE / "questions.jsonl"),
        "--corpus",
        str(EXAMPLE / "corpus.jsonl"),
        "--run",
        str(EXAMPLE / "bm25-run.jsonl"),
        *extra,
    ]


def _hit_at_10_from_files() -> float:
    """Independent of Composer: share of questions whose relevant document is anywhere in its top 10."""
    relevant = {}
    for line in (EXAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines():
        q = json.loads(line)
        relevant[q["id"]] = set(q["relevant_ids"])
    found = 0
    for line in (EXAMPLE / "bm25-run.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        assert len(r["results"]) <= 10
        found += bool(relevant[r["id"]] & {h["id"] for h in r["results"]})
    return found / len(relevant)


def test_example_json_summary(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, _example_args("--k", "1", "3", "5", "10", "--json", "--out", str(tmp_path))
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)  # stdout holds the JSON and nothing else
    assert summary["n_questions"] == 186
    assert summary["match"] == "document"
    assert summary["ks"] == [1, 3, 5, 10]
    names = ["hit_rate", "recall", "precision", "mrr", "ndcg"]
    assert list(summary["metrics"]) == [f"{n}@{k}" for n in names for k in (1, 3, 5, 10)]
    m = summary["metrics"]
    assert m["hit_rate@10"] == pytest.approx(_hit_at_10_from_files())
    assert 0.6 < m["hit_rate@1"] < m["hit_rate@3"] <= m["hit_rate@5"] <= m["hit_rate@10"] <= 1.0
    for k in (1, 3, 5, 10):
        # One relevant paragraph per question: recall equals hit rate, precision is hit rate over k.
        assert m[f"recall@{k}"] == pytest.approx(m[f"hit_rate@{k}"])
        assert m[f"precision@{k}"] == pytest.approx(m[f"hit_rate@{k}"] / k)
        assert m["hit_rate@1"] <= m[f"mrr@{k}"] <= m[f"ndcg@{k}"] <= m[f"hit_rate@{k}"]
        low, high = summary["ci"][f"ndcg@{k}"]
        assert low <= m[f"ndcg@{k}"] <= high
    assert summary["skipped"] == {}
    assert summary["questions_missing_from_run"] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "error_rates.json",
        "samples.csv",
        "summary.json",
        "traces.jsonl",
    ]
    trace = json.loads((tmp_path / "traces.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert trace["retrieved"][0]["text"]  # filled in from the corpus


def test_example_table() -> None:
    result = CliRunner().invoke(app, _example_args("--k", "1", "5"))
    assert result.exit_code == 0, result.output
    assert "186 questions" in result.stdout
    for fragment in ("hit_rate", "ndcg", "@1", "@5", "bootstrap"):
        assert fragment in result.stdout
    assert "@10" not in result.stdout


def test_help_is_fast_and_imports_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "from composer.cli.app import main\n"
        "for argv in (['composer', '--help'], ['composer', 'eval', '--help']):\n"
        "    sys.argv = argv\n"
        "    try:\n"
        "        main()\n"
        "    except SystemExit as e:\n"
        "        assert e.code == 0, e.code\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules], file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "120"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "[]"
    assert "eval" in proc.stdout and "--match" in proc.stdout and "--strict" in proc.stdout
