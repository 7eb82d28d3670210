"""The judge's agreement with human labels travels with the study: `composer optimize` warns before its
first trial when the judge is unchecked or agrees poorly (naming the command that checks it), and the
agreement is in the MLflow parent run, the study summary, the HTML report and the export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fake_llm_server import FakeLLMServer
from sample_study import write_sample_study
from scripted_llm import ScriptedRAG
from typer.testing import CliRunner

from composer.cli.app import app
from composer.data import load_questions
from composer.judges.config import JudgeConfig
from composer.judges.trust import agreement_warning, judge_key, store_checks
from composer.summary import JudgeAgreement

SPACE = """
defaults:
  retrieval: {mode: bm25, k: 3}
  generation: {template: concise}
dimensions:
  retrieval.k: {choices: [3]}
"""
EXPERIMENT = """
name: trusted
corpus: {corpus}
questions: questions.jsonl
search_space: space.yaml
objective: {{k: 3, metrics: {{recall: 1, faithfulness: 1}}}}
sampler: {{name: grid, seed: null}}
pruner: none
n_trials: 1
batch_size: 4
mlflow: {{traces: 1}}
llm: {{model: openai/fake, api_base: URL, timeout: 5}}
judge: {{metrics: [faithfulness]}}
"""


def labels(path: Path) -> Path:
    """Six faithfulness labels, half of them fails: the scripted judge passes every answer (kappa 0)."""
    rows = [{"id": f"l{i}", "question": f"ما عاصمة مصر رقم {i}؟", "answer": f"القاهرة {i}",
             "contexts": ["القاهرة عاصمة مصر"], "metric": "faithfulness", "label": i % 2} for i in range(6)]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.slow
def test_optimize_warns_and_the_checked_agreement_reaches_run_summary_report_and_export(
    tmp_path: Path,
) -> None:
    from mlflow import MlflowClient

    exp_file = write_sample_study(tmp_path, space=SPACE, experiment=EXPERIMENT, n_questions=4)
    golds = {q.question: q.gold_answers[0] for q in load_questions(tmp_path / "questions.jsonl")}
    work = tmp_path / ".composer"
    with FakeLLMServer(ScriptedRAG(golds)) as server:
        url = server.url
        exp_file.write_text(exp_file.read_text(encoding="utf-8").replace("URL", url), encoding="utf-8")
        first = CliRunner().invoke(app, ["optimize", str(exp_file)])
        assert first.exit_code == 0, first.output
        checked = CliRunner().invoke(app, [
            "judges", "check", str(labels(tmp_path / "labels.jsonl")), "--judge", "openai/fake",
            "--llm-base", url, "--metrics", "faithfulness", "--workdir", str(work), "--json"])
        assert checked.exit_code == 0, checked.output
        second = CliRunner().invoke(app, ["optimize", str(exp_file)])
        assert second.exit_code == 0, second.output
    command = f"composer judges check LABELS --judge openai/fake --llm-base {url} --metrics faithfulness"
    warned = first.output.index("never checked against human labels for faithfulness")
    assert warned < first.output.index("trials finished")  # before the first trial
    assert command in " ".join(first.output.split())
    assert json.loads(checked.stdout)["metrics"]["faithfulness"]["kappa"] == 0.0
    flat = " ".join(second.output.split())
    assert ("agrees poorly with human labels (kappa below 0.4) for faithfulness (kappa 0.00 on 6 labels)"
            in flat)
    assert "judge agreement: faithfulness: kappa 0.00" in flat

    client = MlflowClient(f"sqlite:///{work}/mlflow.db")
    experiment = client.get_experiment_by_name("trusted")
    assert experiment is not None
    (parent,) = client.search_runs([experiment.experiment_id], "tags.`composer.role` = 'study'")
    assert parent.data.metrics["judge_kappa.faithfulness"] == 0.0
    assert parent.data.metrics["judge_labels.faithfulness"] == 6.0
    summary_file = client.download_artifacts(parent.info.run_id, "study_summary.json")
    summary = json.loads(Path(summary_file).read_text(encoding="utf-8"))
    stored = summary["judge_agreement"]
    assert stored["judge"] == "openai/fake" and stored["min_kappa"] == 0.4
    assert stored["checks"]["faithfulness"]["n"] == 6 and stored["command"] == command

    best, page = tmp_path / "best.yaml", tmp_path / "report.html"
    exported = CliRunner().invoke(app, ["export", "trusted", "-e", str(exp_file), "--out", str(best)])
    assert exported.exit_code == 0, exported.output
    text = best.read_text(encoding="utf-8")
    assert "# Judge openai/fake, agreement with human labels:" in text
    assert "#   faithfulness: kappa 0.00" in text and "# Warning: the judge openai/fake agrees poorly" in text
    assert yaml.safe_load(text)["judge_agreement"]["checks"]["faithfulness"]["kappa"] == 0.0
    reported = CliRunner().invoke(app, ["report", "-e", str(exp_file), "--out", str(page)])
    assert reported.exit_code == 0, reported.output
    html = page.read_text(encoding="utf-8")
    assert "Can the judge be trusted?" in html and "faithfulness: kappa 0.00" in html and "Warning" in html


def test_the_warning_threshold_is_the_judges_min_kappa(tmp_path: Path) -> None:
    judge = JudgeConfig(model="openai/fake", metrics=("faithfulness",))
    with pytest.raises(ValueError, match="min_kappa"):
        JudgeConfig(model="openai/fake", min_kappa=2)
    config = judge.llm_config(None)
    assert config is not None
    record = {"judge": "openai/fake", "metric": "faithfulness", "scale": "binary", "labels": "l.jsonl",
              "n": 40, "accuracy": 0.75, "kappa": 0.5, "spearman": 0.5, "ci": {"kappa": [0.3, 0.7]}}
    store_checks(tmp_path, {judge_key(config, judge.settings, "faithfulness"): record})
    assert agreement_warning(judge, None, tmp_path) is None  # 0.5 >= the default 0.4
    strict = judge.model_copy(update={"min_kappa": 0.6})
    assert "kappa below 0.6" in str(agreement_warning(strict, None, tmp_path))
    tuned = judge.model_copy(update={"prompt": "strict"})  # another prompt: unchecked again
    assert "never checked" in str(agreement_warning(tuned, None, tmp_path))
    checks = {"faithfulness": record, "answer_correctness": None}
    agreement = JudgeAgreement("openai/fake", 0.4, "cmd", checks)
    assert agreement.lines() == [
        "faithfulness: kappa 0.50 on 40 labels [0.30, 0.70], accuracy 0.75 (l.jsonl)",
        "answer_correctness: never checked against human labels"]
    assert JudgeAgreement.from_dict(agreement.to_dict()) == agreement
