"""What an optimization writes survives a failure after it: the result is stored before its MLflow runs
are logged (a logging failure is a warning), and a registry version is never written twice for one text
(the seed of a second optimization, a winner found again)."""

from __future__ import annotations

import logging
from pathlib import Path

import mlflow
import pytest
from fake_llm_server import FakeLLMServer
from test_engine import INSTRUCTION, proposing, run, server, study_results

from composer.prompt_tuning import engine

__all__ = ["server"]  # the fixture, shared with test_engine


def test_a_logging_failure_is_a_warning_and_the_result_is_stored(
    server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(result: object, target: object) -> str:
        raise OSError("the tracking server is down")

    monkeypatch.setattr(engine, "log_prompt_optimization", broken)
    with caplog.at_level(logging.WARNING, logger=engine.__name__):
        result = run(server, tmp_path, proposing(INSTRUCTION))
    assert result.registered == "prompts:/scripted.answer/2" and result.run_id is None
    assert "the tracking server is down" in caplog.text
    assert study_results(tmp_path).get(result.key) is not None  # a rerun reads it back, registers nothing


def test_a_second_optimization_registers_neither_its_seed_nor_a_known_winner_again(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    first = run(server, tmp_path, proposing(INSTRUCTION))
    second = run(server, tmp_path, proposing(INSTRUCTION), max_proposals=3)  # another key: it runs
    assert first.key != second.key
    assert first.registered == second.registered == "prompts:/scripted.answer/2"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    versions = mlflow.MlflowClient(uri, registry_uri=uri).search_prompt_versions("scripted.answer")
    assert sorted(int(v.version) for v in versions) == [1, 2]
