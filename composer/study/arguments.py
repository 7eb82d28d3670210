"""The experiment a call of ``composer.optimize`` describes: the file, dict or ``ExperimentConfig`` given,
overridden by the call's keyword arguments, with in-memory inputs written once under ``<workdir>/inputs``
so the study records files it can be re-run from."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from pydantic import BaseModel, ValidationError

from composer.data.inputs import corpus_file, questions_file, write_once
from composer.errors import ConfigError, config_error
from composer.study.experiment import DEFAULT_WORKDIR, ExperimentConfig, load_experiment
from composer.study.space_file import parse_search_space
from composer.yamlfile import dump_yaml


def experiment_from_call(
    target: str | Path | ExperimentConfig | Mapping[str, object] | None,
    overrides: Mapping[str, object],
    *,
    mlflow: str | Mapping[str, object] | None,
    factory: Callable[..., object] | None,
    space_argument: str,
) -> ExperimentConfig:
    """The experiment: ``target``'s keys under ``overrides`` (experiment keys; None leaves a key as it is),
    ``mlflow`` a tracking URI or the ``mlflow`` block, ``factory`` the system factory, if any, and
    ``space_argument`` the argument an in-memory space's errors name."""
    base: dict[str, object] = {}
    source = "<optimize>"
    if isinstance(target, str | Path):
        base = load_experiment(target).model_dump(exclude_unset=True)
        source = str(target)
    elif isinstance(target, ExperimentConfig):
        base = target.model_dump(exclude_unset=True)
    elif isinstance(target, Mapping):
        base = dict(target)
    given = {key: _as_given(value) for key, value in overrides.items() if value is not None}
    data = {**base, **given}
    if isinstance(mlflow, str):
        data["mlflow"] = {**dict(_mapping(data.get("mlflow"))), "tracking_uri": mlflow}
    elif mlflow is not None:
        data["mlflow"] = dict(mlflow)
    data.setdefault("name", "composer-study")
    work = Path(str(data.get("workdir") or DEFAULT_WORKDIR)).resolve()
    data["workdir"] = work
    inputs = work / "inputs"
    if "corpus" in data:
        data["corpus"] = corpus_file(data["corpus"], inputs)
    if "questions" in data:
        data["questions"] = questions_file(data["questions"], inputs)
    space = data.get("search_space")
    if isinstance(space, Mapping):  # checked as given: errors name the argument's keys
        parse_search_space(dict(space), free=factory is not None, argument=space_argument)
    if "search_space" in data:
        data["search_space"] = _space_file(data["search_space"], inputs)
    if factory is not None:
        data["system"] = _factory_name(factory)
        data.setdefault("corpus", None)
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        raise config_error(exc, source) from None


def _as_given(value: object) -> object:
    """A block given as its pydantic model, as the mapping of the keys it was given: validated as a dict
    would be (``synth:`` borrows ``llm:`` either way)."""
    return value.model_dump(exclude_unset=True) if isinstance(value, BaseModel) else value


def _mapping(value: object) -> Mapping[str, object]:
    given = _as_given(value)
    return given if isinstance(given, Mapping) else {}


def _factory_name(factory: Callable[..., object]) -> str:
    """How a study names its factory (``module:qualname``): recorded, never imported back from here."""
    module = getattr(factory, "__module__", None) or "<unknown>"
    return f"{module}:{getattr(factory, '__qualname__', type(factory).__name__)}"


def _space_file(space: object, inputs: Path) -> Path:
    """A path as given; an in-memory space written once under ``inputs``, named by its content."""
    if isinstance(space, str | Path):
        return Path(space).resolve()
    if not isinstance(space, Mapping):
        raise ConfigError("expected a search space file or mapping", field="space")
    return write_once(inputs, "space", ".yaml", dump_yaml(dict(space)))
