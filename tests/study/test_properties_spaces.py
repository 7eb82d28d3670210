"""Property-based tests over search spaces and experiments: whatever a user writes, loading it (and, for a
space that loads, checking its conditions, enumerating its grid and sampling trials from it) either works
or raises a ComposerError naming where: never another exception, never a traceback."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import optuna
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from composer.errors import ComposerError, InputError
from composer.pipeline.config import PipelineConfig
from composer.study.experiment import load_experiment
from composer.study.space_file import parse_search_space

KEYS = [
    "retrieval.mode",
    "retrieval.k",
    "retrieval.fusion",
    "retrieval.rrf_k",
    "retrieval.weight",
    "retrieval.analyzer",
    "retrieval.title_weight",
    "chunking.method",
    "chunking.size",
    "chunking.overlap",
    "chunking.window",
    "rerank.method",
    "rerank.lambda",
    "rerank.mmr_lambda",
    "embedding",
    "generation",
    "generation.model",
    "generation.api_base",
    "query_expansion.method",
    "retrieval",
    "nope.nothing",
    "retrieval.nothing",
    "",
    "a.b.c",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        [
            "bm25",
            "dense",
            "hybrid",
            "rrf",
            "dbsf",
            "convex",
            "paragraph",
            "sentence",
            "fixed_chars",
            "none",
            "mmr",
            "default",
            "isri",
            "hybird",
            "http://u:p@h/v1?key=s",
        ]
    ),
    st.text(max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(["method", "size", "k", "mode", "provider", "model", "x"]), inner, max_size=3
        )
    ),
    max_leaves=8,
)
dimension = st.one_of(
    st.fixed_dictionaries(
        {"choices": st.lists(scalars, min_size=0, max_size=5)},
        optional={"when": st.dictionaries(st.sampled_from(KEYS), values, max_size=2)},
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["int", "float", "categorical", "bogus"]), "low": scalars, "high": scalars},
        optional={
            "step": scalars,
            "log": st.booleans(),
            "when": st.dictionaries(st.sampled_from(KEYS), values, max_size=2),
        },
    ),
    st.fixed_dictionaries({"choices": st.dictionaries(st.text(min_size=1, max_size=6), values, max_size=3)}),
    values,
)
spaces = st.one_of(
    st.fixed_dictionaries(
        {"dimensions": st.dictionaries(st.sampled_from(KEYS), dimension, max_size=5)},
        optional={
            "defaults": st.dictionaries(st.sampled_from(["retrieval", "chunking", "x"]), values, max_size=2)
        },
    ),
    values,
)

POOLS: dict[str, list[Any]] = {
    "retrieval.mode": ["bm25", "dense", "hybrid"],
    "retrieval.fusion": ["rrf", "dbsf", "convex"],
    "retrieval.k": [1, 3, 5, 10, 20],
    "retrieval.weight": [0.0, 0.3, 0.5, 1.0],
    "chunking.method": ["paragraph", "sentence", "fixed_chars", "recursive"],
    "chunking.size": [100, 200, 400, 800],
    "chunking.overlap": [0, 50, 100, 300],
    "chunking.window": [0, 1, 2],
    "rerank.method": ["none", "mmr"],
    "rerank.lambda": [0.5, 0.7, 0.9],
}
TYPOS = ["hybird", 7, None, "", 2.5]


@st.composite
def plausible_spaces(draw: st.DrawFn) -> dict[str, Any]:
    """Spaces a user could mean: real settings, values mostly from their domain, ranges, conditions on
    earlier dimensions, with the odd typo or impossible value."""
    keys = draw(st.lists(st.sampled_from(sorted(POOLS)), min_size=1, max_size=6, unique=True))
    dims: dict[str, Any] = {}
    for i, key in enumerate(keys):
        pool = POOLS[key]
        numeric = all(isinstance(v, int | float) for v in pool)
        if numeric and draw(st.booleans()):
            low, high = sorted(draw(st.lists(st.sampled_from(pool), min_size=2, max_size=2)))
            spec: dict[str, Any] = {
                "type": "int" if isinstance(low, int) and isinstance(high, int) else "float",
                "low": low,
                "high": high,
            }
            if draw(st.booleans()):
                spec["step"] = draw(st.sampled_from([1, 0.1, 0.2, 50]))
        else:
            spec = {
                "choices": draw(
                    st.lists(st.sampled_from(pool + TYPOS[:1]), min_size=1, max_size=4, unique_by=repr)
                )
            }
        if i and draw(st.booleans()):
            cond = draw(st.sampled_from(keys[:i]))
            spec["when"] = {cond: draw(st.sampled_from(POOLS[cond] + TYPOS))}
        dims[key] = spec
    return {"dimensions": dims}


FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(st.one_of(plausible_spaces(), spaces))
def test_any_search_space_loads_or_is_one_located_error(data: Any) -> None:
    try:
        space = parse_search_space(data, source="space.yaml")
        space.check_conditions()
    except ComposerError as exc:
        assert isinstance(exc, InputError) and exc.path == "space.yaml"
        return
    try:
        points = space.grid()
    except ComposerError:
        points = []
    for point in points[:20]:
        # A combination its own settings refuse (overlap >= size) is a failed trial, by design.
        with contextlib.suppress(ComposerError):
            assert isinstance(space.build(point), PipelineConfig)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(5):
        trial = study.ask()
        with contextlib.suppress(ComposerError):
            assert isinstance(space.sample(trial), PipelineConfig)
        study.tell(trial, 0.0)


EXPERIMENT_KEYS = [
    "name",
    "corpus",
    "questions",
    "search_space",
    "objective",
    "sampler",
    "pruner",
    "n_trials",
    "timeout",
    "batch_size",
    "split",
    "storage",
    "stop",
    "mlflow",
    "qdrant",
    "llm",
    "judge",
    "synth",
    "workdir",
    "heartbeat_interval",
    "bogus",
]
experiments = st.one_of(st.dictionaries(st.sampled_from(EXPERIMENT_KEYS), values, max_size=8), values)


@FAST
@given(experiments, st.sampled_from(["yaml", "bytes"]))
def test_any_experiment_file_loads_or_is_one_located_error(
    tmp_path_factory: Any, data: Any, form: str
) -> None:
    path = Path(tmp_path_factory.mktemp("exp")) / "experiment.yaml"
    if form == "yaml":
        path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    else:
        path.write_bytes(repr(data).encode("utf-8", "surrogatepass"))
    try:
        load_experiment(path)
    except ComposerError as exc:
        assert isinstance(exc, InputError) and exc.path is not None and Path(exc.path).name == path.name
    assert sorted(p.name for p in path.parent.iterdir()) == ["experiment.yaml"]  # nothing written beside it
