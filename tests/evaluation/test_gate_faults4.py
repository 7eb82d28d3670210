"""The CI gate never passes what it could not compare (issue 41): a weighted metric missing, NaN or
infinite on one side, a baseline that is empty, holds a question twice or a value out of range, a
lower-is-better metric read as higher-is-better; `--k 5` against an objective at @10 is scored, not refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import composer
from composer.cli.app import app
from composer.errors import InputError

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "arcd-sample"
QUESTIONS = SAMPLE / "questions.jsonl"
CORPUS = SAMPLE / "corpus.jsonl"
ANSWER_METRICS = ("token_f1", "exact_match", "faithfulness_overlap", "answer_refusal_rate")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gate4")
    out = {"root": root, "work": root / "work"}
    for name, k in (("winner", 10), ("worse", 1)):
        out[name] = root / f"{name}.yaml"
        out[name].write_text(f"retrieval: {{mode: bm25, k: {k}}}\n", encoding="utf-8")
    saved = _eval(out, out["winner"], "--out", str(root / "old"), "--json")
    assert saved.exit_code == 0, saved.output
    out["old"] = root / "old"
    return out


def _eval(files: dict[str, Path], config: Path, *args: str, questions: Path = QUESTIONS) -> Any:
    return CliRunner().invoke(app, ["eval", str(questions), "--corpus", str(CORPUS), "--config", str(config),
                                    "--workdir", str(files["work"]), *args])


def _bad(result: Any) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "PASS" not in result.output
    return " ".join(str(result.output).split())  # the one line, unwrapped


def _baseline(files: dict[str, Path], folder: Path, edit: Any) -> Path:
    """A copy of the saved baseline folder whose traces went through ``edit(line number, trace)``."""
    folder.mkdir()
    lines = (files["old"] / "traces.jsonl").read_text(encoding="utf-8").splitlines()
    traces = [edit(i, json.loads(line)) for i, line in enumerate(lines, start=1)]
    (folder / "traces.jsonl").write_text("".join(t + "\n" if isinstance(t, str) else json.dumps(t) + "\n"
                                                 for t in traces), encoding="utf-8")
    return folder


def test_a_stated_weighted_metric_the_baseline_did_not_score_is_exit_2(
    files: dict[str, Path], tmp_path: Path
) -> None:
    # What `eval --run` writes for a run without answers: retrieval metrics alone. Counted as 0, the
    # answer metrics made a k=1 system "significantly better" than the k=10 one (exit 0).
    def hits_only(_: int, trace: dict[str, Any]) -> dict[str, Any]:
        trace["metrics"] = {k: v for k, v in trace["metrics"].items() if k not in ANSWER_METRICS}
        return trace

    old = _baseline(files, tmp_path / "run", hits_only)
    # An objective the user stated is never cut: a metric of it one side lacks is exit 2.
    stated = ("--objective", "recall@10=1,token_f1=1")
    message = _bad(_eval(files, files["worse"], "--baseline", str(old), *stated))
    assert f"{old / 'traces.jsonl'} (field 'token_f1'): the baseline has no value of 'token_f1'" in message
    # Issue 42 changed the default objective's rule (it was exit 2 here too): the gate compares over the
    # metrics both sides scored, names those left out, and the k=1 system fails.
    fair = _eval(files, files["worse"], "--baseline", str(old), "--json")
    assert fair.exit_code == 1, fair.output
    gate = json.loads(fair.stdout)["gate"]
    assert gate["reason"].startswith("significantly worse")
    assert set(gate["weights"]) == {"recall@10", "ndcg@10"}
    assert ("compared on the metrics both sides scored (recall@10, ndcg@10); left out: token_f1 (not scored "
            "by the baseline), faithfulness_overlap (not scored by the baseline)") in gate["notes"]


@pytest.mark.parametrize("metrics", ["NaN", "{}"])
def test_a_baseline_of_nan_or_no_metrics_is_exit_2(
    files: dict[str, Path], tmp_path: Path, metrics: str
) -> None:
    def blank(_: int, trace: dict[str, Any]) -> str:
        values = {k: "NaN" for k in trace["metrics"]} if metrics == "NaN" else {}
        trace["metrics"] = {}
        line = json.dumps(trace)
        return line.replace('"metrics": {}', '"metrics": {' + ", ".join(f'"{k}": {v}' for k, v in
                                                                       values.items()) + "}")

    old = _baseline(files, tmp_path / "blank", blank)
    message = _bad(_eval(files, files["winner"], "--baseline", str(old)))
    if metrics == "NaN":  # a trace writes null where a question was not scored: NaN is no value
        where = f"{old / 'traces.jsonl'}:1 (field 'metrics.hit_rate@1')"
        assert f"{where}: a metric is not a finite number: nan" in message
        return
    # The default objective, cut to the metrics both sides scored, has none left (issue 42's rule).
    assert "error: field 'objective': the new system and the baseline share none of the metrics" in message
    message = _bad(_eval(files, files["winner"], "--baseline", str(old), "--metric", "ndcg@10"))
    assert "(field 'ndcg@10'): the baseline has no value of 'ndcg@10'" in message


@pytest.mark.parametrize(("value", "why"), [("Infinity", "is not a finite number: inf"),
                                            ("1e6", "1000000.0 is out of ndcg@10's range [0, 1]"),
                                            ("-0.5", "-0.5 is out of ndcg@10's range [0, 1]")])
def test_an_infinite_or_out_of_range_value_is_exit_2(
    files: dict[str, Path], tmp_path: Path, value: str, why: str
) -> None:
    def spoil(line: int, trace: dict[str, Any]) -> Any:
        if line != 3:
            return trace
        return json.dumps(trace).replace(f'"ndcg@10": {trace["metrics"]["ndcg@10"]!r}', f'"ndcg@10": {value}')

    old = _baseline(files, tmp_path / "spoilt", spoil)
    message = _bad(_eval(files, files["winner"], "--baseline", str(old), "--metric", "ndcg@10"))
    assert f"{old / 'traces.jsonl'}:3 (field 'metrics.ndcg@10'): " in message and why in message


def test_a_question_twice_in_the_baseline_is_exit_2(files: dict[str, Path], tmp_path: Path) -> None:
    first: dict[str, Any] = {}

    def duplicate(line: int, trace: dict[str, Any]) -> dict[str, Any]:
        if line == 1:
            first.update(trace)
        return {**trace, "question_id": first["question_id"]} if line == 5 else trace

    old = _baseline(files, tmp_path / "twice", duplicate)
    message = _bad(_eval(files, files["winner"], "--baseline", str(old)))
    assert f"{old / 'traces.jsonl'}:5" in message
    assert f"duplicate question id '{first['question_id']}' (lines 1 and 5)" in message


def test_an_empty_baseline_yaml_is_exit_2(files: dict[str, Path], tmp_path: Path) -> None:
    empty = tmp_path / "baseline.yaml"
    empty.write_text("", encoding="utf-8")  # what a failed `git show REV:FILE > baseline.yaml` leaves
    assert f"{empty}: the baseline pipeline file is empty" in _bad(_eval(files, files["winner"], "--baseline",
                                                                        str(empty)))
    with pytest.raises(InputError, match="the baseline pipeline file is empty"):
        composer.evaluate(files["winner"], QUESTIONS, CORPUS, workdir=files["work"], baseline=empty)


def test_a_gate_on_few_questions_warns(files: dict[str, Path], tmp_path: Path) -> None:
    few = tmp_path / "few.jsonl"
    lines = QUESTIONS.read_text(encoding="utf-8").splitlines(keepends=True)
    few.write_text("".join(lines[:2]), encoding="utf-8")
    result = _eval(files, files["winner"], "--baseline", str(files["worse"]), "--json", questions=few)
    assert result.exit_code == 0, result.output
    notes = json.loads(result.stdout)["gate"]["notes"]
    assert "only 2 question(s): the 95% CI means little below 5; gate on more" in notes
    shown = _eval(files, files["winner"], "--baseline", str(files["worse"]), questions=few)
    assert "note: only 2 question(s)" in " ".join(shown.stdout.split())
    many = _eval(files, files["winner"], "--baseline", str(files["worse"]), "--json")
    assert not any("question(s)" in note for note in json.loads(many.stdout)["gate"]["notes"])


def test_refusing_every_question_is_never_better(files: dict[str, Path]) -> None:
    # answer_refusal_rate is lower-is-better: gated or weighted as higher-is-better, refusing would win.
    message = _bad(_eval(files, files["winner"], "--baseline", str(files["worse"]), "--metric",
                         "answer_refusal_rate"))
    assert "field 'metric': 'answer_refusal_rate' is lower-is-better, and the gate reads higher" in message
    message = _bad(_eval(files, files["winner"], "--objective", "recall@10=1,answer_refusal_rate=1"))
    assert "(field 'objective.metrics'): 'answer_refusal_rate' is lower-is-better, and a composite" in message
    assert "refusal_accuracy" in message


def test_k_5_with_an_objective_at_10_scores_both(files: dict[str, Path], tmp_path: Path) -> None:
    export = tmp_path / "best.yaml"
    weights = {"recall@10": 0.5, "ndcg@10": 0.5}
    export.write_text(yaml.safe_dump({"pipeline": {"retrieval": {"mode": "bm25", "k": 10}},
                                      "objective": {"k_eval": 10, "weights": weights}}), encoding="utf-8")
    result = _eval(files, export, "--k", "5", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert {"recall@5", "recall@10", "ndcg@10"} <= set(summary["metrics"])
    assert "recall@1" not in summary["metrics"]
    assert summary["objective"]["weights"] == weights
    # The same for gates: the composite of the default objective (@10), and one metric at another cutoff.
    gated = _eval(files, files["worse"], "--k", "5", "--baseline", str(files["winner"]), "--json")
    assert gated.exit_code == 1, gated.output
    assert set(json.loads(gated.stdout)["gate"]["weights"]) >= {"recall@10", "ndcg@10"}
    one = _eval(files, files["winner"], "--k", "5", "--baseline", str(files["old"]), "--metric", "ndcg@10",
                "--json")
    assert one.exit_code == 0, one.output
    assert json.loads(one.stdout)["gate"]["weights"] == {"ndcg@10": 1.0}
