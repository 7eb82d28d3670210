"""The staged prompt stage never fails the study it follows: what it needs (a generator, a reflection
model) is checked before anything runs, and what stops it at run time (the budget spent) skips it in one
line while the study's summary is still logged."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_llm_server import FakeLLMServer
from mlflow import MlflowClient
from sample_study import SAMPLE, write_experiment
from scripted_llm import golds_of
from test_tune_prompt_cli import INSTRUCTION, KEY_ENV, TUNING, scripted
from typer.testing import CliRunner

from composer.cli.app import app
from composer.errors import ConfigError
from composer.study.experiment import ExperimentConfig, load_experiment
from composer.study.space import Dimension, SearchSpace
from composer.study.staged import plan_of

SPACE = SearchSpace((Dimension("retrieval.k", "categorical", (3, 5)),
                     Dimension("generation.temperature", "categorical", (0.0, 0.5))), {}, "s")


def _staged(**fields: object) -> ExperimentConfig:
    return ExperimentConfig.model_validate({
        "name": "s", "corpus": "c.jsonl", "questions": "q.jsonl", "search_space": "s.yaml",
        "strategy": "staged", "n_trials": 4, "stages": {"prompt": True}, "split": {"held_out": 0.3},
        "objective": {"metrics": {"recall": 1}}, **fields})


def test_the_prompt_stage_without_a_reflection_model_is_refused_before_anything_runs() -> None:
    with pytest.raises(ConfigError) as raised:
        plan_of(_staged(), SPACE, None)
    assert raised.value.field == "prompt_tuning.reflection_model"


def test_the_prompt_stage_without_a_generator_is_refused_before_anything_runs() -> None:
    with pytest.raises(ConfigError) as raised:
        plan_of(_staged(prompt_tuning={"reflection_model": "openai/x"}), SPACE, None)
    assert raised.value.field == "llm"


@pytest.mark.slow
def test_a_budget_spent_before_the_prompt_stage_skips_it_and_the_study_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-staged-prompt-test")
    monkeypatch.chdir(tmp_path)
    route, _ = scripted(golds_of(SAMPLE / "questions.jsonl"), INSTRUCTION)
    with FakeLLMServer(route) as server:
        exp = write_experiment(
            tmp_path, dims={"retrieval.mode": {"choices": ["bm25"]}, "retrieval.k": {"choices": [3, 5]},
                            "generation.template": {"choices": ["grounded"]}},
            n_questions=20, n_trials=3, strategy="staged", stages={"retrieval_trials": 2, "prompt": True},
            objective={"k": 3, "metrics": {"recall": 1, "token_f1": 1}}, split={"held_out": 0.4},
            workdir="work", batch_size=20, judge={"metrics": ["answer_correctness"]}, prompt_tuning=TUNING,
            llm={"model": "openai/fake", "api_base": server.url, "api_key_env": KEY_ENV},
            stop={"max_llm_calls": 45},
        )
        result = CliRunner().invoke(app, ["optimize", str(exp)])
    assert result.exit_code == 0, result.output
    assert "prompt stage: skipped: " in result.output, result.output
    config = load_experiment(exp)
    client = MlflowClient(config.tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name(config.mlflow_experiment).experiment_id],
                              filter_string="tags.`composer.study` = 's'")
    parent = [r for r in runs if "composer.trial" not in r.data.tags]
    assert parent and parent[0].info.status == "FINISHED" and "best_value" in parent[0].data.metrics
