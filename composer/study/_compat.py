"""What a study's trials were scored by and sampled from, kept on the study when it is created and compared
when it is reopened: another objective or search space would rank old composites against new ones, run
other pipelines beside the old ones, or fail every trial in Optuna ("dynamic value space").

Any change refuses, weights included: a trial's value is its composite, which Optuna's samplers and
pruners have learnt from, so re-weighting the old trials would not undo what the study did with them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from composer.errors import ComposerError, option
from composer.redact import flatten, scrub_url

if TYPE_CHECKING:
    import optuna

    from composer.objective import ObjectiveConfig
    from composer.study.space import Dimension, SearchSpace

ATTR = "composer.compat"
"""Study user attribute: ``{"objective": {...}, "search_space": {...}, "fingerprint": ...}``."""


def describe_objective(config: ObjectiveConfig) -> dict[str, Any]:
    """The objective as the composite reads it: weights normalized (``{recall: 2}`` is ``{recall: 1}``)."""
    total = sum(config.metrics.values())
    weights = {m: round(w / total, 12) for m, w in sorted(config.metrics.items()) if w}
    return {"metrics": weights, "k": config.k, "secondary": list(config.secondary)}


def describe_space(space: SearchSpace) -> dict[str, Any]:
    """Each dimension's values and conditions and the space's defaults, credentials in URLs masked."""
    dims = {d.key: _dimension(d) for d in space.dimensions}
    return _plain({"dimensions": dims, "defaults": dict(space.defaults)})


def _dimension(dim: Dimension) -> dict[str, Any]:
    out: dict[str, Any]
    if dim.bundles:
        out = {"choices": {label: dict(bundle) for label, bundle in dim.bundles.items()}}
    elif dim.kind == "categorical":
        out = {"choices": list(dim.choices)}
    else:
        out = {"type": dim.kind, "low": dim.low, "high": dim.high, "step": dim.step, "log": dim.log}
    if dim.when:
        out["when"] = {k: list(v) for k, v in dim.when.items()}
    return out


def _plain(data: Any) -> Any:
    """``data`` as JSON stores and reads it back (tuples as lists), URL credentials in strings masked."""
    if isinstance(data, str):
        return scrub_url(data)
    if isinstance(data, Mapping):
        return {str(k): _plain(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_plain(v) for v in data]
    return data


def _fingerprint(description: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest()[:16]


def check_unchanged(
    study: optuna.Study, storage: optuna.storages.BaseStorage, objective: ObjectiveConfig, space: SearchSpace
) -> None:
    """Record the objective and space on a new study; on a study that has them, refuse (exit 2) when the
    current ones differ, saying what changed and which new study name is free. A study from before this
    check adopts the current ones."""
    current = {"objective": describe_objective(objective), "search_space": describe_space(space)}
    stored = study.user_attrs.get(ATTR)
    if not isinstance(stored, Mapping):
        study.set_user_attr(ATTR, {**current, "fingerprint": _fingerprint(current)})
        return
    if stored.get("fingerprint") == _fingerprint(current):
        return
    changes = _objective_changes(stored.get("objective") or {}, current["objective"])
    changes += _space_changes(stored.get("search_space") or {}, current["search_space"])
    if not changes:
        return
    raise ComposerError(
        f"study '{study.study_name}' was run with another objective or search space; "
        + "; ".join(changes)
        + f". Its trials would be ranked with trials scored or sampled differently: start a new study "
        f"({option('study_name', _free_name(storage, study.study_name))}), or restore the files it was run "
        "with"
    )


def _objective_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    before, after = old.get("metrics") or {}, new["metrics"]
    if set(before) != set(after):
        out.append(f"objective changed: metrics {_show(before)} -> {_show(after)}")
    elif before != after:
        out.append(f"objective changed: weights {_show(before)} -> {_show(after)}")
    for key in ("k", "secondary"):
        if old.get(key) != new[key]:
            out.append(f"objective changed: {key} {_show(old.get(key))} -> {_show(new[key])}")
    return out


def _space_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    before, after = old.get("dimensions") or {}, new["dimensions"]
    for key in [*before, *(k for k in after if k not in before)]:
        if key not in after:
            out.append(f"search space changed: dimension {key} removed")
        elif key not in before:
            out.append(f"search space changed: dimension {key} added")
        else:
            for field in sorted({*before[key], *after[key]}):
                was, now = before[key].get(field), after[key].get(field)
                if was != now:
                    out.append(f"search space changed: {key} {field} {_show(was)} -> {_show(now)}")
    was_defaults, now_defaults = flatten(old.get("defaults") or {}), flatten(new["defaults"])
    for key in sorted({*was_defaults, *now_defaults}):
        if was_defaults.get(key) != now_defaults.get(key):
            out.append(f"search space changed: defaults {key} {_show(was_defaults.get(key, '(unset)'))} -> "
                       f"{_show(now_defaults.get(key, '(unset)'))}")
    return out


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _free_name(storage: optuna.storages.BaseStorage, name: str) -> str:
    """``name-2``, ``name-3``...: the first no study in the storage has."""
    import optuna

    taken = set(optuna.get_all_study_names(storage))
    n = 2
    while f"{name}-{n}" in taken:
        n += 1
    return f"{name}-{n}"
