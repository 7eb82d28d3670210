"""The study's ``stop:`` budget holds inside one candidate's scoring: a prompt is scored in the study's
batches, the budget checked after each as a trial checks it, so an optimization stops within one batch
of its limit, with no held-out re-score and nothing stored."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_llm_server import FakeLLMServer
from sample_study import write_experiment
from scripted_llm import golds_of
from test_tune_prompt_cli import INSTRUCTION, KEY_ENV, TUNING, scripted, study
from typer.testing import CliRunner

from composer.cli.app import app
from composer.study.experiment import load_experiment
from composer.study.prompt_stage import prepare, stored

__all__ = ["study"]  # the fixture, shared with test_tune_prompt_cli

BATCH = 4
"""Questions a batch scores: a third of the selection split's 12."""


def _experiment(root: Path, url: str, **fields: object) -> Path:
    return write_experiment(
        root, dims={"retrieval.mode": {"choices": ["bm25"]}}, defaults={"retrieval": {"k": 3}},
        n_questions=20, n_trials=1, objective={"k": 3, "metrics": {"token_f1": 1}},
        split={"held_out": 0.4}, workdir="work", batch_size=BATCH, prompt_tuning=TUNING,
        llm={"model": "openai/fake", "api_base": url, "api_key_env": KEY_ENV, "cache": False}, **fields,
    )


@pytest.mark.slow
def test_a_budget_smaller_than_one_selection_scoring_stops_within_one_batch(study: Path) -> None:
    golds = golds_of(Path(__file__).resolve().parents[2] / "examples" / "arcd-sample" / "questions.jsonl")
    route, _ = scripted(golds, INSTRUCTION)
    with FakeLLMServer(route) as server:
        exp = _experiment(study, server.url)
        runner = CliRunner()
        assert (done := runner.invoke(app, ["optimize", str(exp)])).exit_code == 0, done.output
        tuning = prepare(load_experiment(exp))
        _, before = tuning.spent_before()
        assert len(tuning.data.questions) == 3 * BATCH
        _experiment(study, server.url, stop={"max_llm_calls": before + 1})
        server.reset_counts()
        result = runner.invoke(app, ["tune-prompt", "-e", str(exp)])
        sent = server.stats()["chat_requests"]
    assert result.exit_code == 0, result.output
    assert 0 < sent < 30, result.output  # of 62: one batch (4 questions, each answered and judged)
    assert "LLM budget spent" in result.stdout and "verdict: none" in result.stdout, result.stdout
    assert stored(prepare(load_experiment(exp))) is None  # a rerun with a larger budget goes on
