"""A factory's study owns its settings: a ``generation.prompt`` key among them means what the factory makes
of it, so neither the MLflow writer nor the export reads it as a team's prompt (a string stays a string,
a mapping is no ``UserPrompt``), and the study writes its runs and exports."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient
from sample_study import sample_corpus, sample_questions
from typer.testing import CliRunner

import composer
from composer.cli.app import app


@pytest.mark.parametrize("choices", [["prompts/a.yaml", "plain words"],
                                     {"terse": {"tone": "terse"}, "polite": {"user": "{question}"}}])
def test_a_factory_study_with_a_generation_prompt_setting_writes_its_runs_and_exports(
    tmp_path: Path, choices: Any,
) -> None:
    corpus = sample_corpus()
    questions = sample_questions(corpus, 4)
    ids = [d.id for d in corpus.documents]
    seen: list[Any] = []

    def factory(settings: dict[str, Any]) -> Any:
        seen.append(settings["generation"]["prompt"])
        return lambda question: ids[:3]

    space = {"generation.prompt": {"choices": choices}}
    result = composer.optimize(factory, space=space, questions=questions,
                               corpus=corpus.source, n_trials=2, workdir=tmp_path, name="f",
                               objective={"metrics": {"recall": 1.0}, "k": 3},
                               sampler={"name": "grid", "seed": None})
    assert result.best_value is not None and len({repr(s) for s in seen}) == 2
    runs = MlflowClient(result.tracking_uri).search_runs(
        [MlflowClient(result.tracking_uri).get_experiment_by_name("f").experiment_id],
        filter_string="tags.`composer.trial` != ''")
    assert len(runs) == 2 and not any("composer.prompt.sha256" in r.data.tags for r in runs)
    out = tmp_path / "best.yaml"
    exported = CliRunner().invoke(app, ["export", "f", "--storage", result.storage, "--out", str(out)])
    assert exported.exit_code == 0, exported.output
    assert "# Prompt:" not in out.read_text(encoding="utf-8")
