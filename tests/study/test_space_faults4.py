"""Choices a trial could never run with are refused when the space loads (issue 41): an empty model name
(``generation.model: {choices: [openai/gpt-4o-mini, ""]}``) was a pydantic traceback in both ``optimize``
and ``--estimate``; now one line naming the space file, the field and the choice, exit 2."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from composer.cli.app import app
from composer.errors import ConfigError
from composer.study.space_file import parse_search_space

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arcd-sample"
EXPERIMENT = f"""
name: blank
corpus: {EXAMPLE / "corpus.jsonl"}
questions: {EXAMPLE / "questions.jsonl"}
search_space: space.yaml
objective: {{k: 5, metrics: {{recall: 1, token_f1: 1}}}}
n_trials: 2
llm: {{model: openai/gpt-4o-mini, api_base: "http://127.0.0.1:9/v1"}}
"""


@pytest.mark.parametrize("extra", [[], ["--estimate"]])
def test_an_empty_model_name_is_one_line_naming_file_field_and_choice(
    tmp_path: Path, extra: list[str]
) -> None:
    space = tmp_path / "space.yaml"
    space.write_text('dimensions:\n  generation.model: {choices: [openai/gpt-4o-mini, ""]}\n',
                     encoding="utf-8")
    exp = tmp_path / "blank.yaml"
    exp.write_text(EXPERIMENT, encoding="utf-8")
    result = CliRunner().invoke(app, ["optimize", str(exp), *extra])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: {space} (field 'dimensions.generation.model.choices'): ''")
    assert "Traceback" not in result.output and "ValidationError" not in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / ".composer").exists()  # nothing made: refused before the study opens


@pytest.mark.parametrize(("key", "choices"), [
    ("generation.model", [" "]),
    ("generation.api_base", ["http://127.0.0.1:9/v1", ""]),
    ("rerank.model", [""]),
    ("embedding.model", [""]),
    ("embedding.api_base", [""]),
    ("generation.model", [123]),
    ("retrieval.k", [3, "5"]),
    ("generation.temperature", ["0.5"]),
    ("retrieval.mode", ["bm26"]),
])
def test_every_choice_list_is_checked_when_the_space_loads(key: str, choices: list[Any]) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_search_space({"dimensions": {key: {"choices": choices}}}, source="space.yaml")
    assert raised.value.path == "space.yaml" and raised.value.field == f"dimensions.{key}.choices"


def test_a_blank_name_in_a_bundle_is_refused_and_an_empty_prefix_is_not() -> None:
    bundles = {"generation": {"choices": {"mini": {"model": "openai/gpt-4o-mini"}, "none": {"model": ""}}}}
    with pytest.raises(ConfigError, match="names nothing") as raised:
        parse_search_space({"dimensions": bundles})
    assert raised.value.field == "dimensions.generation.choices.none.model"
    # An empty prefix is a value of its own (no prefix), and null a model's "none" (extractive answers).
    parse_search_space({"dimensions": {"embedding.query_prefix": {"choices": ["", "query: "]},
                                       "generation.model": {"choices": [None, "openai/gpt-4o-mini"]}}})
