"""A prompt text is registered once: ``composer export --register`` run again after a failure past the
prompt's registration (the model's logging) references the version it left, instead of adding a copy."""

from __future__ import annotations

import copy
from pathlib import Path

import mlflow
import pytest

from composer.study import registry


def test_a_second_registration_of_one_prompt_text_references_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry, "prompt_version_tags", lambda doc: {"composer.study": "s",
                                                                      "composer.trial": "0",
                                                                      "composer.scores": "{}"})
    prompt = {"default": {"system": "Answer briefly.", "user": "{contexts}\n{question}"}}
    doc = {"pipeline": {"generation": {"prompt": prompt}}, "scores": {}, "objective": {}}
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first, _ = registry._register_prompt(copy.deepcopy(doc), "m", uri)  # the model's logging then failed
    again = copy.deepcopy(doc)
    second, line = registry._register_prompt(again, "m", uri)
    assert first == second == "prompts:/m.answer/1"
    assert again["pipeline"]["generation"]["prompt"]["source"] == "prompts:/m.answer/1"
    assert "registered before" in line
    client = mlflow.MlflowClient(uri, registry_uri=uri)
    assert [int(v.version) for v in client.search_prompt_versions("m.answer")] == [1]
