"""Budgets that cannot be kept, and studies whose budget is spent (issue 41): a dollar budget over a model
without a price, or a misspelt key of ``llm.prices``, is refused before any request (exit 2); a rerun of
a study whose budget is spent sends nothing and adds no trial; a budget stop is no bad input (exit 1)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest
from fake_llm_server import FakeLLMServer
from scripted_llm import golds_of
from typer.testing import CliRunner

from composer.cli.app import app
from composer.errors import ConfigError
from composer.llm.config import LLMConfig, TokenPrice
from composer.study.budget import check_prices
from composer.study.experiment import StopConfig, load_experiment
from composer.study.fate import fate_of
from composer.study.space_file import parse_search_space

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arcd-sample"
SPACE = """
defaults:
  retrieval: {mode: bm25, k: 3}
dimensions:
  generation.template: {choices: [concise, grounded]}
"""
EXPERIMENT = """
name: spent
corpus: {corpus}
questions: questions.jsonl
search_space: space.yaml
objective: {{k: 3, metrics: {{recall: 1, token_f1: 1}}}}
sampler: {{name: grid, seed: null}}
pruner: none
n_trials: 2
batch_size: 2
mlflow: {{traces: 0}}
stop: {stop}
llm:
  model: openai/fake-unlisted
  api_base: {url}
{prices}
"""


@pytest.fixture
def fake_llm_golds(tmp_path: Path) -> dict[str, str]:
    """The study's questions (the sample's first 6) and space, written where its experiment will be."""
    lines = (EXAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()[:6]
    (tmp_path / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "space.yaml").write_text(SPACE, encoding="utf-8")
    return golds_of(tmp_path / "questions.jsonl")


def _experiment(tmp_path: Path, server: FakeLLMServer, stop: str, prices: str = "") -> Path:
    exp = tmp_path / "spent.yaml"
    exp.write_text(EXPERIMENT.format(corpus=EXAMPLE / "corpus.jsonl", url=server.url, stop=stop,
                                     prices=prices), encoding="utf-8")
    return exp


def _sent(server: FakeLLMServer) -> int:
    stats = server.stats()
    return stats["chat_requests"] + stats["pings"]


def test_a_dollar_budget_over_an_unpriced_model_is_refused_before_any_request(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    exp = _experiment(tmp_path, fake_llm, "{max_cost_usd: 0.000001}")
    result = CliRunner().invoke(app, ["optimize", str(exp)])
    assert result.exit_code == 2, result.output
    line = " ".join(result.output.split())
    assert "field 'stop.max_cost_usd'" in line and "no price for openai/fake-unlisted" in line, line
    assert "prices" in line and "Traceback" not in result.output
    assert _sent(fake_llm) == 0
    assert not (tmp_path / ".composer" / "optuna.db").exists()  # no study was created


def test_a_misspelt_price_key_is_refused_naming_the_closest_model(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    prices = "  prices: {openai/fake-unlistd: {input: 1, output: 2}}"
    for stop in ("{max_cost_usd: 5}", "{}"):  # a price that prices nothing is wrong with or without a budget
        exp = _experiment(tmp_path, fake_llm, stop, prices)
        for extra in ([], ["--estimate"]):
            result = CliRunner().invoke(app, ["optimize", str(exp), *extra])
            assert result.exit_code == 2, result.output
            line = " ".join(result.output.split())
            assert "field 'llm.prices.openai/fake-unlistd'" in line, line
            assert "did you mean 'openai/fake-unlisted'" in line, line
    assert _sent(fake_llm) == 0


def _data(llm: LLMConfig, models: list[str], judge: LLMConfig | None = None) -> Any:
    """What ``check_prices`` reads of a study's data: its LLMs, its space and its llm block."""
    space = parse_search_space({"dimensions": {"generation.model": {"choices": models}}})
    endpoints = [llm.model_copy(update={"model": m, "price": None}) for m in models]
    return SimpleNamespace(system=None, llm=llm, space=space,
                           llm_endpoints=lambda: endpoints + ([judge] if judge is not None else []))


def test_an_explicit_zero_price_keeps_a_self_hosted_model_under_a_dollar_budget() -> None:
    """A self-hosted model states its price, 0 included; a judge counts like any other model, and the
    models of litellm's price map need none."""
    stop = StopConfig(max_cost_usd=1.0)
    zero = {"openai/local": TokenPrice(input=0, output=0)}
    llm = LLMConfig(model="openai/local", api_base="http://127.0.0.1:9/v1", prices=zero)
    check_prices(_data(llm, ["openai/local", "openai/gpt-4o-mini"]), stop)
    judge = LLMConfig(model="openai/judge-unlisted", api_base="http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="no price for openai/judge-unlisted"):
        check_prices(_data(llm, ["openai/local"], judge), stop)
    check_prices(_data(llm, ["openai/local"], judge), StopConfig(max_llm_calls=10))  # no dollars to keep
    bare = LLMConfig(model="openai/local", api_base="http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="no price for openai/local"):
        check_prices(_data(bare, ["openai/local"]), stop)


@pytest.mark.slow
def test_a_spent_study_is_stopped_with_exit_1_and_its_rerun_sends_nothing(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    exp = _experiment(tmp_path, fake_llm, "{max_llm_calls: 1}")
    first = CliRunner().invoke(app, ["optimize", str(exp)])
    assert first.exit_code == 1, first.output  # a spent budget is not bad input
    assert "LLM budget spent" in " ".join(first.output.split())
    storage = load_experiment(exp).storage_url
    trials = optuna.load_study(study_name="spent", storage=storage).get_trials(deepcopy=False)
    assert [fate_of(t) for t in trials] == ["budget"], [fate_of(t) for t in trials]
    sent = _sent(fake_llm)
    assert sent > 0
    for _ in range(2):
        again = CliRunner().invoke(app, ["optimize", str(exp)])
        assert again.exit_code == 1, again.output
        line = " ".join(again.output.split())
        assert f"LLM budget spent: {sent - 1} requests of max_llm_calls 1" in line, line  # less the ping
        assert "nothing is run" in line
        assert "Traceback" not in again.output
        assert _sent(fake_llm) == sent  # no test request, no trial's
        assert len(optuna.load_study(study_name="spent", storage=storage).get_trials(deepcopy=False)) == 1
