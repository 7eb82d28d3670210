"""The staged ``prompt`` stage end to end: ``composer optimize`` on a ``strategy: staged`` study with
``stages: {prompt: true}`` runs stage 1, stage 2 and then optimizes the winner's prompt against the scripted
127.0.0.1 server of ``test_tune_prompt_cli`` (the generator answers with the exact gold phrase only when the
system prompt carries an instruction; the reflection model proposes it once shown failures). The stage's
verdict is printed, stored on the study for its report, version 2 registered; a rerun sends nothing."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from fake_llm_server import FakeLLMServer
from sample_study import SAMPLE, write_experiment
from scripted_llm import golds_of
from test_tune_prompt_cli import INSTRUCTION, KEY_ENV, TUNING, scripted
from typer.testing import CliRunner

from composer.cli.app import app
from composer.study.experiment import load_experiment
from composer.study.prompt_stage import latest
from composer.study.staged import STAGED_ATTR, SUFFIX


@pytest.mark.slow
def test_the_staged_prompt_stage_optimizes_the_winner_after_stage_2_and_a_rerun_sends_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-staged-prompt-test")
    monkeypatch.chdir(tmp_path)
    route, seen = scripted(golds_of(SAMPLE / "questions.jsonl"), INSTRUCTION)
    server = FakeLLMServer(route).start()
    try:
        exp = write_experiment(
            tmp_path, dims={"retrieval.mode": {"choices": ["bm25"]}, "retrieval.k": {"choices": [3, 5]},
                            "generation.template": {"choices": ["grounded"]}},
            n_questions=20, n_trials=3, strategy="staged", stages={"retrieval_trials": 2, "prompt": True},
            objective={"k": 3, "metrics": {"recall": 1, "token_f1": 1}}, split={"held_out": 0.4},
            workdir="work", batch_size=20, judge={"metrics": ["answer_correctness"]}, prompt_tuning=TUNING,
            llm={"model": "openai/fake", "api_base": server.url, "api_key_env": KEY_ENV},
        )
        runner = CliRunner()
        first = runner.invoke(app, ["optimize", str(exp)])
        assert first.exit_code == 0, first.output
        assert "reflection" in seen  # the stage ran: the reflection model was shown failures
        assert "prompt stage: verdict: better" in first.output, first.output
        assert "prompt stage: registered: prompts:/s.answer/2 (promoted)" in first.output, first.output

        config = load_experiment(exp)
        retrieval = optuna.load_study(study_name="s" + SUFFIX, storage=config.storage_url)
        study = optuna.load_study(study_name="s", storage=config.storage_url)
        assert retrieval.trials and study.trials and STAGED_ATTR in study.user_attrs  # stage 1, then stage 2
        result = latest(study)
        assert result is not None and result.verdict is not None and result.verdict.outcome == "better"
        assert result.registered == "prompts:/s.answer/2"
        assert INSTRUCTION in (result.best.prompt.for_language("ar").system or "")

        server.reset_counts()
        again = runner.invoke(app, ["optimize", str(exp)])
        assert again.exit_code == 0, again.output
        assert server.stats()["chat_requests"] == 0
        assert "prompt stage: verdict: better" in again.output

        report = runner.invoke(app, ["report", "-e", str(exp)])
        assert report.exit_code == 0, report.output
        page = (tmp_path / "work" / "s-report.html").read_text(encoding="utf-8")
        assert "The optimized prompt" in page and INSTRUCTION in page
    finally:
        server.stop()
