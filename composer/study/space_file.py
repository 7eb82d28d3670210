"""Reading a search-space file: its sections, its dimensions with their values and ``when`` conditions,
and its bundles, each checked against the pipeline's config (or, for a user's factory, taken as it is),
so that a wrong key or value is reported with the place it is written, before any trial.

The file's format is described in ``composer.study.space``; the space it makes is a ``SearchSpace``.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError, create_model
from pydantic.fields import FieldInfo

from composer.errors import ConfigError, config_error
from composer.pipeline.config import PipelineConfig
from composer.redact import scrub_url
from composer.study.space import PROMPT_KEY, Dimension, Kind, SearchSpace, deep_merge
from composer.yamlfile import read_yaml


def load_search_space(path: str | Path, *, free: bool = False) -> SearchSpace:
    p = Path(path)
    return parse_search_space(read_yaml(p, what="search space file"), source=str(p), free=free)


SECTIONS = frozenset({"description", "defaults", "dimensions"})
"""The keys of a space in its full form; a mapping with none of them is a flat mapping of dimensions."""


def parse_search_space(
    data: Any, *, source: str = "<space>", free: bool = False, argument: str | None = None
) -> SearchSpace:
    """A space from its mapping (a file's content, or an API argument): the full form (``defaults``,
    ``dimensions``) or a flat mapping of dimensions. ``free``: any keys, a factory's parameters, checked
    for form only (Composer cannot know what a user's factory accepts). ``argument``: the name of the API
    argument an in-memory space came as; errors then name its key (``space["b"]["low"]``), not a file."""
    flat = isinstance(data, dict) and bool(data) and not SECTIONS.intersection(data)
    full = {"dimensions": data} if flat else data
    try:
        if flat:
            _check_flat(data, source)
        return _parse_full(full, source, free)
    except ConfigError as exc:
        if argument is not None:
            # Located by the argument's own subscripts where a file would be: 'space["b"]["low"]: ...'.
            where = _argument_field(exc.field, full, flat, argument)
            raise ConfigError(exc.raw_message, path=where) from None
        if flat and exc.field is not None:  # the keys as the file has them, without the full form's
            field = exc.field.removeprefix("dimensions.")
            raise ConfigError(exc.raw_message, path=exc.path, field=field) from None
        raise


def _check_flat(data: dict[str, Any], source: str) -> None:
    """A flat mapping's keys are dimensions; one that looks like a misspelt section ('dimension:') is
    said to be one, not taken for a setting."""
    for key in data:
        close = difflib.get_close_matches(str(key), sorted(SECTIONS), n=1, cutoff=0.8)
        if close:
            raise ConfigError(f"unknown key (did you mean '{close[0]}'?)", path=source, field=str(key))


def _argument_field(field: str | None, full: Any, flat: bool, argument: str) -> str:
    """A dotted field of the full form as the API argument's subscripts: ``dimensions.retrieval.k.low``
    -> ``space["retrieval.k"]["low"]`` (dotted dimension and condition keys kept whole)."""
    parts: list[str] = []
    rest = field or ""
    dims = full.get("dimensions") if isinstance(full, dict) else None
    if rest.startswith("dimensions.") and isinstance(dims, dict):
        rest = rest.removeprefix("dimensions.")
        names = [str(k) for k in dims if rest == str(k) or rest.startswith(f"{k}.")]
        name = max(names, key=len, default=None)
        if name is not None:
            parts = [] if flat else ["dimensions"]
            parts.append(name)
            rest = rest.removeprefix(name).removeprefix(".")
            if rest.startswith("when."):
                parts.append("when")
                rest = rest.removeprefix("when.")
                parts.append(rest)
                rest = ""
    parts += [p for p in rest.split(".") if p]
    return argument + "".join(f'["{p}"]' for p in parts)


def _parse_full(data: Any, source: str, free: bool) -> SearchSpace:
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping of dimensions (or one with 'dimensions')", path=source)
    unknown = set(data) - SECTIONS
    if unknown:
        raise ConfigError(
            f"unknown key; give either a flat mapping of dimensions or {', '.join(sorted(SECTIONS))} "
            "(with the dimensions under 'dimensions')",
            path=source,
            field=sorted(unknown)[0],
        )
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise ConfigError("expected a mapping of settings", path=source, field="defaults")
    if not free:
        defaults = _canonical_tree(defaults, source)
        try:
            PipelineConfig.model_validate(deep_merge(PipelineConfig().to_dict(), defaults))
        except ValidationError as exc:
            raise config_error(exc, source, under="defaults") from None
    raw_dims = data.get("dimensions")
    if not isinstance(raw_dims, dict) or not raw_dims:
        raise ConfigError("expected a non-empty mapping of dotted keys", path=source, field="dimensions")
    keys = [str(k) if free else canonical_key(str(k), source, f"dimensions.{k}") for k in raw_dims]
    if len(set(keys)) < len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ConfigError("declared twice", path=source, field=f"dimensions.{dup}")
    dims = [_parse_dimension(str(raw_key), spec, keys[:i], keys[i + 1:], source, free)
            for i, (raw_key, spec) in enumerate(raw_dims.items())]
    return SearchSpace(tuple(dims), defaults, source, free)


def _parse_dimension(raw_key: str, spec: Any, earlier: Sequence[str], later: Sequence[str],
                     source: str, free: bool) -> Dimension:
    key = raw_key if free else canonical_key(raw_key, source, f"dimensions.{raw_key}")
    where = f"dimensions.{raw_key}"
    if isinstance(spec, list):  # a bare list: its choices
        spec = {"choices": spec}
    if not isinstance(spec, dict):
        raise ConfigError("expected a list of choices, or a mapping such as {choices: [...]} or "
                          "{low: .., high: ..}", path=source, field=where)
    allowed = {"type", "choices", "low", "high", "step", "log", "when"}
    if set(spec) - allowed:
        raise ConfigError("unknown key", path=source, field=f"{where}.{sorted(set(spec) - allowed)[0]}")
    target = None if free else _field_at(key)
    kind = spec.get("type", "categorical" if "choices" in spec else _range_kind(spec, target))
    if kind not in ("categorical", "int", "float"):
        raise ConfigError("'type' must be categorical, int or float (or give 'choices', or 'low' and 'high')",
                          path=source, field=f"{where}.type")
    when = _parse_when(spec.get("when"), key, earlier, later, source, where, free)
    if kind == "categorical":
        return _categorical(key, spec.get("choices"), target, when, source, where, free)
    return _numeric_range(key, kind, spec, target, when, source, where)


def _categorical(key: str, choices: Any, target: FieldInfo | type[BaseModel] | None,
                 when: dict[str, tuple[Any, ...]], source: str, where: str, free: bool) -> Dimension:
    """A categorical dimension: a list of values, or a mapping of labelled bundles."""
    if key == PROMPT_KEY and not free:
        return _prompt_choices(choices, when, source, where)
    if isinstance(choices, dict) and choices:
        bundles = {str(label): _free_bundle(b, source, f"{where}.choices.{label}") if free
                   else _check_bundle(key, b, source, f"{where}.choices.{label}")
                   for label, b in choices.items()}
        return Dimension(key, "categorical", tuple(bundles), bundles, when=when)
    if not isinstance(choices, list) or not choices:
        raise ConfigError("expected a non-empty list (or a mapping of labelled bundles)",
                          path=source, field=f"{where}.choices")
    if isinstance(target, type):
        raise ConfigError(f"'{key}' is a section: give its choices as labelled mappings",
                          path=source, field=f"{where}.choices")
    for choice in choices:
        if target is not None:
            _check_value(target, choice, source, f"{where}.choices")
        if isinstance(choice, str) and scrub_url(choice) != choice:
            raise ConfigError(
                "a choice holds a credential, and the study storage keeps every choice: name the key's "
                "environment variable (api_key_env), or make the choices labelled bundles",
                path=source, field=f"{where}.choices",
            )
    return Dimension(key, "categorical", tuple(choices), when=when)


def _prompt_choices(choices: Any, when: dict[str, tuple[Any, ...]], source: str, where: str) -> Dimension:
    """``generation.prompt``'s choices: a file path or registry URI is its own label (resolved before the
    first trial: ``SearchSpace.prompts_resolved``), an inline prompt a bundle checked now, labelled
    ``inline-<first 8 of its sha256>`` (stable however the list is reordered)."""
    from composer.prompts.spec import UserPrompt
    from composer.prompts.template import check_prompt

    if not isinstance(choices, list) or not choices:
        raise ConfigError("expected a non-empty list of prompts (inline {system, user}, files, registry "
                          "URIs)", path=source, field=f"{where}.choices")
    labels: list[str] = []
    bundles: dict[str, dict[str, Any]] = {}
    for i, choice in enumerate(choices):
        field = f"{where}.choices[{i}]"
        if isinstance(choice, str) and choice.strip():
            label = choice
        elif isinstance(choice, dict):
            try:
                prompt = check_prompt(UserPrompt.model_validate(choice), field=field)
            except ValidationError as exc:
                raise config_error(exc, source, under=field) from None
            except ConfigError as exc:
                raise ConfigError(exc.raw_message, path=source, field=exc.field) from None
            label = f"inline-{prompt.sha256[:8]}"
            bundles[label] = prompt.model_dump(mode="json")
        else:
            raise ConfigError("expected a prompt: inline {system, user}, a file path or a registry URI",
                              path=source, field=field)
        if label in labels:
            raise ConfigError("given twice", path=source, field=field)
        labels.append(label)
    return Dimension(PROMPT_KEY, "categorical", tuple(labels), bundles, when=when)


def _numeric_range(key: str, kind: Kind, spec: Mapping[str, Any], target: FieldInfo | type[BaseModel] | None,
                   when: dict[str, tuple[Any, ...]], source: str, where: str) -> Dimension:
    """An int or float dimension from ``low`` to ``high``, with an optional ``step`` or ``log`` scale."""
    if target is not None and (
        isinstance(target, type) or target.annotation is not {"int": int, "float": float}[kind]
    ):
        raise ConfigError(f"'{key}' is not {'an integer' if kind == 'int' else 'a float'} setting",
                          path=source, field=f"{where}.type")
    low: Any = spec.get("low")
    high: Any = spec.get("high")
    step, log = spec.get("step"), bool(spec.get("log", False))
    for name, v in (("low", low), ("high", high)):  # missing, or null
        if v is None:
            raise ConfigError("required for int and float dimensions", path=source, field=f"{where}.{name}")
    for name, v in (("low", low), ("high", high), ("step", step)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)
                              or (kind == "int" and not isinstance(v, int))):
            raise ConfigError(f"expected {'an integer' if kind == 'int' else 'a number'}",
                              path=source, field=f"{where}.{name}")
    if low > high:
        raise ConfigError(f"low ({low}) is greater than high ({high})", path=source, field=where)
    if step is not None and step <= 0:
        raise ConfigError("must be positive", path=source, field=f"{where}.step")
    if step is not None and not math.isclose((high - low) / step, round((high - low) / step), abs_tol=1e-9):
        # Optuna would quietly cut high to the last step below it (low=1, high=10, step=50: only 1).
        last = low + math.floor((high - low) / step) * step
        raise ConfigError(f"high - low ({high - low:g}) is not a multiple of step ({step:g}); the last "
                          f"value reached would be {last:g}", path=source, field=f"{where}.step")
    if log and (step is not None or low <= 0):
        raise ConfigError("a log-scaled dimension needs low > 0 and no step", path=source,
                          field=f"{where}.log")
    if target is not None:
        _check_value(target, low, source, f"{where}.low")
        _check_value(target, high, source, f"{where}.high")
    return Dimension(key, kind, low=low, high=high, step=step, log=log, when=when)


def _range_kind(spec: Mapping[str, Any], target: FieldInfo | type[BaseModel] | None) -> Kind | None:
    """The type of a range given without one: the setting's own (a pipeline space), else the bounds'
    (integers: int; any float: float). None when there is no range to read it from."""
    if "low" not in spec or "high" not in spec:
        return None
    if isinstance(target, FieldInfo) and target.annotation in (int, float):
        return "int" if target.annotation is int else "float"
    bounds = (spec["low"], spec["high"])
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in bounds)
    return "int" if ints else "float"


def _parse_when(raw: Any, key: str, earlier: Sequence[str], later: Sequence[str], source: str,
                where: str, free: bool) -> dict[str, tuple[Any, ...]]:
    """Conditions read earlier dimensions or, for settings no dimension samples, the defaults."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError("expected a mapping of dotted keys to a value or a list of values",
                          path=source, field=f"{where}.when")
    when: dict[str, tuple[Any, ...]] = {}
    for raw_key, allowed in raw.items():
        cond = str(raw_key) if free else canonical_key(str(raw_key), source, f"{where}.when.{raw_key}")
        pending = [k for k in (key, *later) if k not in earlier]
        if any(cond == k or cond.startswith(k + ".") for k in pending):
            raise ConfigError(f"'{cond}' must be declared before '{key}' to be a condition of it",
                              path=source, field=f"{where}.when.{raw_key}")
        when[cond] = tuple(allowed) if isinstance(allowed, list) else (allowed,)
    return when


def canonical_key(dotted: str, source: str = "<space>", where: str | None = None) -> str:
    """``rerank.mmr_lambda`` -> ``rerank.lambda`` (the spelling PipelineConfig.to_dict writes)."""
    parts = dotted.split(".")
    section = PipelineConfig.model_fields.get(parts[0])
    if section is None or len(parts) > 2:
        raise ConfigError("not a pipeline setting (expected section.field, e.g. chunking.size)",
                          path=source, field=where or dotted)
    if len(parts) == 1:
        return parts[0]
    model = section.annotation
    assert isinstance(model, type) and issubclass(model, BaseModel)
    for name, info in model.model_fields.items():
        if parts[1] in (name, info.alias):
            return f"{parts[0]}.{info.alias or name}"
    raise ConfigError(f"'{parts[0]}' has no setting '{parts[1]}' (known: {', '.join(_names(model))})",
                      path=source, field=where or dotted)


def _names(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()]


def _field_at(key: str) -> FieldInfo | type[BaseModel]:
    """The pydantic field a canonical key names, or the section's model for a bare section key."""
    parts = key.split(".")
    model = PipelineConfig.model_fields[parts[0]].annotation
    assert isinstance(model, type) and issubclass(model, BaseModel)
    if len(parts) == 1:
        return model
    return next(info for name, info in model.model_fields.items() if parts[1] in (name, info.alias))


def _check_value(target: FieldInfo | type[BaseModel], value: Any, source: str, where: str) -> None:
    """``value`` as the setting takes it, and no blank name where a setting takes a name or null (a model,
    an endpoint, a key variable): checked as the space loads, not when a trial samples it."""
    assert isinstance(target, FieldInfo)
    if isinstance(value, str) and not value.strip() and target.default is None:
        raise ConfigError(f"{value!r} names nothing: give a name, or null for none", path=source, field=where)
    try:
        annotation = Any if target.annotation is None else target.annotation
        create_model("Setting", value=(annotation, target)).model_validate({"value": value}, strict=True)
    except ValidationError as exc:
        raise config_error(exc, source, field=where) from None


def _check_bundle(key: str, bundle: Any, source: str, where: str) -> dict[str, Any]:
    """A bundle's keys must be settings of its section; cross-field rules are checked when sampled."""
    target = _field_at(key)
    if not isinstance(target, type):
        raise ConfigError(f"labelled mapping choices need a section key (e.g. '{key.split('.')[0]}')",
                          path=source, field=where)
    if not isinstance(bundle, dict):
        raise ConfigError("expected a mapping of settings", path=source, field=where)
    out: dict[str, Any] = {}
    for name, value in bundle.items():
        sub = canonical_key(f"{key}.{name}", source, f"{where}.{name}")
        _check_value(_field_at(sub), value, source, f"{where}.{name}")
        out[sub.split(".")[1]] = value
    return out


def _free_bundle(bundle: Any, source: str, where: str) -> dict[str, Any]:
    if not isinstance(bundle, dict):
        raise ConfigError("expected a mapping of settings", path=source, field=where)
    return dict(bundle)


def _canonical_tree(defaults: dict[str, Any], source: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for section, values in defaults.items():
        canonical_key(str(section), source, f"defaults.{section}")
        if not isinstance(values, dict):
            raise ConfigError("expected a mapping of settings", path=source, field=f"defaults.{section}")
        out[section] = {canonical_key(f"{section}.{k}", source, f"defaults.{section}.{k}").split(".")[1]: v
                        for k, v in values.items()}
    return out
