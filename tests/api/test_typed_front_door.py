"""The typed front door: a type checker catches a misspelt experiment key or a value of the wrong type in a
call of ``composer.optimize`` or ``composer.evaluate`` before anything runs, and ``ExperimentOptions``
stays in step with ``ExperimentConfig``'s fields."""

from __future__ import annotations

import inspect
import re
import typing
from pathlib import Path

import pytest

import composer
from composer.options import ExperimentOptions, PrunerName, SamplerName
from composer.study.experiment import ExperimentConfig, PrunerConfig, SamplerConfig

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "arcd-sample"
PARAMETER_KEYS = {"space": "search_space"}
"""``optimize``'s parameters named otherwise than the experiment key they set."""


def _named_keys() -> set[str]:
    """The experiment keys ``optimize`` takes as parameters of its own."""
    own = set(inspect.signature(composer.optimize).parameters) - {"target", "concurrency", "estimate",
                                                                  "experiment"}
    return {PARAMETER_KEYS.get(name, name) for name in own}


def test_experiment_options_mirror_the_experiment_config_fields() -> None:
    options = set(ExperimentOptions.__annotations__)
    assert not options & _named_keys(), "a key is both a parameter of optimize and in ExperimentOptions"
    assert options | _named_keys() == set(ExperimentConfig.model_fields), (
        "ExperimentOptions (composer/options.py) no longer mirrors ExperimentConfig: add or drop the key"
    )


def test_the_sampler_pruner_and_strategy_names_are_the_experiments() -> None:
    def names(annotation: object) -> set[object]:
        return {arg for arg in typing.get_args(annotation) if arg is not type(None)}

    assert set(typing.get_args(SamplerName)) == names(SamplerConfig.model_fields["name"].annotation)
    assert set(typing.get_args(PrunerName)) == names(PrunerConfig.model_fields["name"].annotation)
    strategy = str(ExperimentOptions.__annotations__["strategy"])  # a ForwardRef: the module's types are lazy
    expected = names(ExperimentConfig.model_fields["strategy"].annotation)
    assert set(re.findall(r"""["'](\w+)["']""", strategy)) == expected


CALLS = '''
from pathlib import Path
from typing import Any
import composer
from composer.options import ExperimentOptions

def factory(settings: dict[str, Any]) -> composer.protocols.Retriever:
    raise NotImplementedError

def right() -> None:
    composer.optimize(factory, space={"k": [1, 3]}, questions="q.jsonl", n_trials=2, sampler="tpe",
                      timeout=60.0, batch_size=10, split={"held_out": 0.3}, llm={"model": "openai/x"},
                      objective=composer.ObjectiveConfig(k=5))
    composer.optimize(composer.ExperimentConfig.model_validate({}), strategy="staged", allow_env=["KEY"])
    keys: ExperimentOptions = {"max_questions": 20, "stop": {"consecutive_failures": 2}}
    composer.optimize(Path("experiment.yaml"), **keys)
    composer.evaluate(lambda question: [], "q.jsonl", mlflow={"tracking_uri": "sqlite:///m.db"})

def misspelt_key() -> None:
    composer.optimize(factory, space={"k": [1]}, questions="q.jsonl", n_trails=5)  # wrong: 1

def wrong_type() -> None:
    composer.optimize(factory, space={"k": [1]}, questions="q.jsonl", batch_size="50")  # wrong: 2

def unknown_sampler() -> None:
    composer.optimize(factory, space={"k": [1]}, questions="q.jsonl", sampler="tpee")  # wrong: 3

def wrong_strategy() -> None:
    composer.optimize("experiment.yaml", strategy="greedy")  # wrong: 4

def misspelt_mlflow_key() -> None:
    composer.evaluate(lambda question: [], "q.jsonl", mlflow={"tracking_url": "sqlite:///m.db"})  # wrong: 5
'''


FRONT_DOOR = """
[mypy]
python_version = 3.11
ignore_missing_imports = True
follow_imports = skip
[mypy-composer,composer.api,composer.options,composer.protocols]
follow_imports = normal
"""
"""The front door's modules checked, the rest of the package (and its dependencies) read as ``Any``: a few
seconds instead of the whole tree's minutes, and only looser, never stricter, than a user's checker."""


def test_a_type_checker_catches_a_misspelt_key_or_a_wrong_type(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    config = tmp_path / "mypy.ini"
    config.write_text(FRONT_DOOR, encoding="utf-8")
    out, err, _ = api.run(["--config-file", str(config), "--cache-dir", str(tmp_path / "cache"),
                           "--no-error-summary", "-c", CALLS])
    lines = CALLS.splitlines()
    flagged = {int(found) for found in re.findall(r"^<string>:(\d+): error", out, flags=re.MULTILINE)}
    wrong = {n for n, line in enumerate(lines, start=1) if "# wrong:" in line}
    assert flagged == wrong, f"{out}\n{err}"


def test_a_misspelt_key_still_fails_at_run_time_naming_it(tmp_path: Path) -> None:
    keys: dict[str, object] = {"n_trails": 5}  # what an unchecked caller may pass
    with pytest.raises(composer.ConfigError, match="n_trails"):
        composer.optimize(lambda settings: (lambda question: []), space={"k": [1]},
                          questions=SAMPLE / "questions.jsonl", workdir=tmp_path, n_trials=1, **keys)


def test_an_experiment_config_and_blocks_as_models_are_taken_as_their_keys(tmp_path: Path) -> None:
    from composer.evaluation.splits import SplitConfig
    from composer.objective import ObjectiveConfig
    from composer.study.arguments import experiment_from_call

    given = {"name": "typed", "search_space": ROOT / "search_spaces" / "arabic-offline.yaml",
             "questions": SAMPLE / "questions.jsonl", "corpus": SAMPLE / "corpus.jsonl", "workdir": tmp_path}

    def experiment(target: ExperimentConfig | dict[str, object], blocks: dict[str, object]
                   ) -> ExperimentConfig:
        return experiment_from_call(target, blocks, mlflow=None, factory=None, space_argument="space")

    as_dicts = experiment(given, {"objective": {"k": 5}, "split": {"held_out": 0.3}})
    as_models = experiment(ExperimentConfig.model_validate(given),
                           {"objective": ObjectiveConfig(k=5), "split": SplitConfig(held_out=0.3)})
    assert as_models == as_dicts
