"""A trial's identity reads a prompt by its text: the same study from another checkout (or on workers that
mount it elsewhere) finds its trials; and a registry alias is pinned by the study on first resolution, so
a resumed study rebuilds its winner with the version it measured after the alias moved."""

from __future__ import annotations

from pathlib import Path

import optuna
import yaml

from composer.prompts import UserPrompt, register_prompt, set_alias
from composer.study.data import PINS_ATTR, config_hash
from composer.study.space_file import load_search_space

TEXT = {"system": "Answer from the passages only.", "user": "{contexts}\n\nQuestion: {question}"}


def _space(folder: Path, choice: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "p.yaml").write_text(yaml.safe_dump(TEXT), encoding="utf-8")
    path = folder / "space.yaml"
    path.write_text(yaml.safe_dump({"dimensions": {"generation.prompt": {"choices": [choice]}}}),
                    encoding="utf-8")
    return path


def test_one_space_in_two_folders_gives_one_config_hash(tmp_path: Path) -> None:
    hashes = set()
    for folder in ("checkout-a", "elsewhere/checkout-b"):
        space, _ = load_search_space(_space(tmp_path / folder, "p.yaml")).prompts_resolved(None, {})
        config = space.build({"generation.prompt": "p.yaml"})
        assert isinstance(config.generation.prompt, UserPrompt)
        assert config.generation.prompt.source == str(tmp_path / folder / "p.yaml")  # the record keeps it
        hashes.add(config_hash(config))
    assert len(hashes) == 1


def test_a_pinned_alias_resolves_to_the_version_the_study_measured(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    label = "prompts:/answers@prod"
    register_prompt("answers", UserPrompt.model_validate(TEXT), tracking_uri=uri)
    set_alias("answers", "prod", 1, uri)
    path = _space(tmp_path / "s", label)
    first, pins = load_search_space(path).prompts_resolved(uri, {})
    assert pins == {label: "prompts:/answers/1"}
    moved = UserPrompt.model_validate({**TEXT, "system": "Answer in one word."})
    set_alias("answers", "prod", int(register_prompt("answers", moved, tracking_uri=uri)[-1]), uri)
    again, _ = load_search_space(path).prompts_resolved(uri, pins)  # the study's pins
    params = {"generation.prompt": label}
    assert config_hash(again.build(params)) == config_hash(first.build(params))
    fresh, _ = load_search_space(path).prompts_resolved(uri, {})  # a new study follows the alias
    assert config_hash(fresh.build(params)) != config_hash(first.build(params))


def test_a_study_records_its_pins_once(tmp_path: Path) -> None:
    from composer.study.inputs import stored_pins

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="s", storage=storage)
    study.set_user_attr(PINS_ATTR, {"prompts:/answers@prod": "prompts:/answers/1"})
    assert stored_pins(storage, "s") == {"prompts:/answers@prod": "prompts:/answers/1"}
    assert stored_pins(storage, "no-such-study") == {}
