"""The CI gate: `composer eval --baseline` and `composer.evaluate(baseline=...)` on the bundled sample.

BM25 retrieving 10 (the winner) against BM25 retrieving 1: the composite reads recall and nDCG at 10, so
k=1 is clearly worse; k=20 only adds hits below the cutoff (a neutral change).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import composer
from composer.cli.app import app
from composer.errors import InputError
from composer.evaluation.gate import GateResult

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "arcd-sample"
QUESTIONS = SAMPLE / "questions.jsonl"
CORPUS = SAMPLE / "corpus.jsonl"
GATE_SCRIPT = REPO / "examples" / "ci" / "gate.sh"
VERDICT_KEYS = {"metric", "weights", "n", "new", "baseline", "difference", "ci95", "margin", "decision",
                "passed", "reason", "baseline_source", "notes"}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gate")
    out = {"root": root, "work": root / "work"}
    for name, k in (("winner", 10), ("worse", 1), ("neutral", 20)):
        out[name] = root / f"{name}.yaml"
        out[name].write_text(f"retrieval: {{mode: bm25, k: {k}}}\n", encoding="utf-8")
    return out


def _eval(files: dict[str, Path], config: Path, *args: str, questions: Path = QUESTIONS) -> Any:
    return CliRunner().invoke(app, ["eval", str(questions), "--corpus", str(CORPUS), "--config", str(config),
                                    "--workdir", str(files["work"]), *args])


def _verdict(result: Any) -> dict[str, Any]:
    gate: dict[str, Any] = json.loads(result.stdout)["gate"]
    return gate


def test_the_same_config_passes(files: dict[str, Path]) -> None:
    result = _eval(files, files["winner"], "--baseline", str(files["winner"]), "--json")
    assert result.exit_code == 0, result.output
    gate = _verdict(result)
    assert gate["decision"] == "pass" and gate["difference"] == 0.0 and gate["ci95"] == [0.0, 0.0]


def test_a_clearly_worse_config_fails_with_exit_1(files: dict[str, Path]) -> None:
    result = _eval(files, files["worse"], "--baseline", str(files["winner"]), "--json")
    assert result.exit_code == 1, result.output
    gate = _verdict(result)
    assert set(gate) == VERDICT_KEYS
    assert gate["decision"] == "fail" and not gate["passed"] and gate["n"] == 186
    assert gate["ci95"][1] < 0 and gate["difference"] == pytest.approx(gate["new"] - gate["baseline"])
    assert gate["reason"].startswith("significantly worse")
    assert gate["metric"] == "composite" and sum(gate["weights"].values()) == pytest.approx(1.0)


def test_a_neutral_change_passes_and_the_table_says_why(files: dict[str, Path]) -> None:
    result = _eval(files, files["neutral"], "--baseline", str(files["winner"]))
    assert result.exit_code == 0, result.output
    assert "CI gate: composite" in result.stdout and "PASS" in result.stdout
    assert "95% CI" in result.stdout and "no significant drop" in result.stdout


def test_baseline_from_an_out_folder_and_one_metric(files: dict[str, Path], tmp_path: Path) -> None:
    saved = _eval(files, files["winner"], "--out", str(tmp_path / "old"), "--json")
    assert saved.exit_code == 0, saved.output
    worse = _eval(files, files["worse"], "--baseline", str(tmp_path / "old"), "--metric", "ndcg@10", "--json")
    assert worse.exit_code == 1, worse.output
    gate = _verdict(worse)
    assert gate["metric"] == "ndcg@10" and gate["weights"] == {"ndcg@10": 1.0}
    assert gate["baseline"] == pytest.approx(json.loads(saved.stdout)["metrics"]["ndcg@10"])
    assert gate["baseline_source"] == str(tmp_path / "old" / "traces.jsonl")
    # A drop inside the margin passes unless it is significant: token_f1 changes little from k=10 to k=20.
    neutral = _eval(files, files["neutral"], "--baseline", str(tmp_path / "old"), "--margin", "0.05",
                    "--json")
    assert neutral.exit_code == 0, neutral.output
    assert _verdict(neutral)["margin"] == 0.05 and _verdict(neutral)["passed"]


def test_the_composite_of_an_exported_objective(files: dict[str, Path], tmp_path: Path) -> None:
    export = tmp_path / "best.yaml"
    weights = {"recall@5": 0.5, "ndcg@5": 0.5}
    export.write_text(yaml.safe_dump({"pipeline": {"retrieval": {"mode": "bm25", "k": 10}},
                                      "objective": {"k_eval": 5, "weights": weights}}), encoding="utf-8")
    result = _eval(files, export, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    stated = summary["objective"]
    assert stated["weights"] == weights and stated["source"] == str(export)
    means = summary["metrics"]
    assert stated["composite"] == pytest.approx((means["recall@5"] + means["ndcg@5"]) / 2)
    # --objective overrides it, and the gate compares that composite.
    gated = _eval(files, export, "--objective", "mrr@10=1", "--baseline", str(files["worse"]), "--json")
    assert gated.exit_code == 0, gated.output
    assert _verdict(gated)["weights"] == {"mrr@10": 1.0}
    assert _verdict(gated)["reason"].startswith("significantly better")


def _bad(files: dict[str, Path], *args: str, questions: Path = QUESTIONS) -> str:
    result = _eval(files, files["winner"], *args, questions=questions)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return str(result.output)


def test_bad_input_exits_2_naming_the_file(files: dict[str, Path], tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    assert f"{missing}: no such folder or file" in _bad(files, "--baseline", str(missing))
    missing_yaml = str(tmp_path / "missing.yaml")
    assert f"{missing_yaml}: pipeline file not found" in _bad(files, "--baseline", missing_yaml)
    (tmp_path / "empty").mkdir()
    assert f"{tmp_path / 'empty'}: no traces.jsonl here" in _bad(files, "--baseline", str(tmp_path / "empty"))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "traces.jsonl").write_text('{"question_id": "q1", "metrics": {"ndcg@10": "high"}}\n')
    message = _bad(files, "--baseline", str(broken))
    assert f"{broken / 'traces.jsonl'}:1 (field 'metrics.ndcg@10'): a metric is not a number" in message
    unscored = _bad(files, "--baseline", str(files["winner"]), "--metric", "context_recall")
    assert "'context_recall' is not scored" in unscored
    assert "--metric and --margin set the gate" in _bad(files, "--margin", "0.1")
    assert "expected METRIC=WEIGHT" in _bad(files, "--objective", "recall@10=high")
    typo = _bad(files, "--objective", "recal@10=1")
    assert "recal@10=1 (field 'objective.metrics'): unknown metric 'recal@10'" in typo


def test_question_sets_that_differ_name_both_files(files: dict[str, Path], tmp_path: Path) -> None:
    saved = _eval(files, files["winner"], "--out", str(tmp_path / "old"), "--json")
    assert saved.exit_code == 0, saved.output
    fewer = tmp_path / "fewer.jsonl"
    fewer.write_text("".join(QUESTIONS.read_text(encoding="utf-8").splitlines(keepends=True)[:100]),
                     encoding="utf-8")
    message = _bad(files, "--baseline", str(tmp_path / "old"), questions=fewer)
    assert f"{tmp_path / 'old' / 'traces.jsonl'}: the baseline was scored on other questions" in message
    assert f"86 of {tmp_path / 'old' / 'traces.jsonl'}'s questions are not in {fewer}" in message


def test_the_api_returns_the_typed_verdict(files: dict[str, Path], tmp_path: Path) -> None:
    questions = tmp_path / "questions.jsonl"
    questions.write_text(QUESTIONS.read_text(encoding="utf-8"), encoding="utf-8")
    export = tmp_path / "best.yaml"
    export.write_text(yaml.safe_dump({"pipeline": {"retrieval": {"mode": "bm25", "k": 1}},
                                      "provenance": {"study": "s", "split": {"held_out": 0.3, "seed": 0}}}),
                      encoding="utf-8")
    report = composer.evaluate(export, questions, CORPUS, workdir=files["work"], split="held_out",
                               baseline=files["winner"], gate_metric="recall@10")
    assert isinstance(report.gate, GateResult)
    assert report.gate.n == len(report) == round(186 * 0.3) and not report.gate.passed
    assert report.gate.exit_code == 1 and report.summary()["gate"]["decision"] == "fail"
    with pytest.raises(InputError, match="the baseline was scored on other questions"):
        composer.evaluate(files["winner"], questions, CORPUS, workdir=files["work"], baseline=report)
    with pytest.raises(InputError, match="split"):
        composer.evaluate({"retrieval": {"mode": "bm25"}}, questions, CORPUS, split="held_out")
    plain = composer.evaluate(files["winner"], questions, CORPUS, workdir=files["work"])
    assert plain.gate is None and "gate" not in plain.summary()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="the example script is a bash script")
def test_the_example_ci_script_runs_offline_on_the_sample(files: dict[str, Path], tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "WORKDIR": str(files["work"]), "OUT": str(tmp_path / "report"), "HF_HUB_OFFLINE": "1"}
    pipeline = REPO / "examples" / "ci" / "pipeline.yaml"

    def gate(new: Path, baseline: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(GATE_SCRIPT), str(new), str(baseline)], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)

    passed = gate(pipeline, pipeline)
    assert passed.returncode == 0, passed.stderr
    assert json.loads((tmp_path / "report" / "summary.json").read_text(encoding="utf-8"))["gate"]["passed"]
    failed = gate(files["worse"], pipeline)
    assert failed.returncode == 1, failed.stderr
    assert "FAIL" in failed.stdout and "significantly worse" in failed.stdout
    assert gate(pipeline, tmp_path / "nope").returncode == 2
    workflow = yaml.safe_load((REPO / "examples" / "ci" / "github-workflow.yml").read_text(encoding="utf-8"))
    steps = workflow["jobs"]["gate"]["steps"]
    assert any("examples/ci/gate.sh" in step.get("run", "") for step in steps)
