"""Issue 41, point 3: a config may read a key only from a variable the user allowed, and a configured
api_base never receives a key litellm would take from the environment on its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_llm_server import ChatRequest, FakeLLMServer
from typer.testing import CliRunner

import composer
import composer.secrets as secrets
from composer.cli.app import app
from composer.errors import ConfigError
from composer.llm import LLMClient, LLMConfig
from composer.study.experiment import ExperimentConfig

SECRET = "aws-secret-Zq8LmN4pR7sT2vW9"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arcd-sample"


@pytest.fixture(autouse=True)
def fresh_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with nothing allowed beyond the COMPOSER_ prefix."""
    monkeypatch.setattr(secrets, "_ALLOWED", set())
    monkeypatch.delenv(secrets.ALLOW_ENV, raising=False)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)


@pytest.fixture()
def server() -> Iterator[FakeLLMServer]:
    seen: list[str] = []

    def route(req: ChatRequest) -> str:
        seen.append(req.headers.get("authorization", ""))
        return "ok"

    with FakeLLMServer(route) as srv:
        srv.seen = seen  # type: ignore[attr-defined]
        yield srv


def test_a_name_the_user_did_not_allow_is_refused_before_any_request(server: FakeLLMServer,
                                                                      tmp_path: Path) -> None:
    config = LLMConfig(model="openai/x", api_base=server.url, api_key_env="AWS_SECRET_ACCESS_KEY")
    with pytest.raises(ConfigError) as err:
        LLMClient(config, cache_dir=tmp_path)
    message = str(err.value)
    assert "AWS_SECRET_ACCESS_KEY" in message and "--allow-env AWS_SECRET_ACCESS_KEY" in message
    assert err.value.field == "api_key_env" and SECRET not in message
    assert server.requests == 0


@pytest.mark.parametrize("how", ["prefix", "list", "api"])
def test_an_allowed_name_is_read(how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    name = "COMPOSER_MY_KEY" if how == "prefix" else "AWS_SECRET_ACCESS_KEY"
    monkeypatch.setenv(name, SECRET)
    if how == "list":
        monkeypatch.setenv(secrets.ALLOW_ENV, "OTHER, AWS_SECRET_ACCESS_KEY")
    elif how == "api":
        composer.allow_env("AWS_SECRET_ACCESS_KEY")
    assert LLMConfig(model="openai/x", api_key_env=name).api_key() == SECRET


def test_allowing_a_bad_name_is_refused() -> None:
    with pytest.raises(ConfigError, match="not an environment variable name"):
        composer.allow_env("A B")


def test_the_experiment_allows_names_and_a_pipeline_cannot(tmp_path: Path) -> None:
    base = {"name": "x", "search_space": tmp_path / "s.yaml", "questions": tmp_path / "q.jsonl",
            "corpus": tmp_path / "c.jsonl"}
    ExperimentConfig.model_validate({**base, "allow_env": ["AWS_SECRET_ACCESS_KEY"]})
    assert secrets.env_allowed("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(ValueError, match="not an environment variable name"):
        ExperimentConfig.model_validate({**base, "allow_env": ["$HOME"]})
    with pytest.raises(ConfigError, match="unknown key"):
        composer.PipelineConfig.from_dict({"allow_env": ["X"]})


def test_eval_refuses_a_pipeline_that_names_a_foreign_variable(server: FakeLLMServer, tmp_path: Path) -> None:
    pipeline = tmp_path / "pr.yaml"
    pipeline.write_text(f"retrieval: {{mode: bm25, k: 3}}\ngeneration: {{model: openai/x, api_base: "
                        f"'{server.url}', api_key_env: AWS_SECRET_ACCESS_KEY}}\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["eval", str(EXAMPLE / "questions.jsonl"), "--corpus",
                                      str(EXAMPLE / "corpus.jsonl"), "--config", str(pipeline),
                                      "--workdir", str(tmp_path / "w")])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and "AWS_SECRET_ACCESS_KEY" in result.output
    assert "--allow-env" in result.output and SECRET not in result.output
    assert server.requests == 0


def test_allow_env_option_allows_the_name() -> None:
    result = CliRunner().invoke(app, ["export", "--allow-env", "AWS_SECRET_ACCESS_KEY"])
    assert result.exit_code == 2  # export needs --out or --register: the option was read first
    assert secrets.env_allowed("AWS_SECRET_ACCESS_KEY")
    bad = CliRunner().invoke(app, ["export", "--allow-env", "A-B", "--out", "x.yaml"])
    assert bad.exit_code == 2 and "--allow-env" in bad.output and "Traceback" not in bad.output


def test_an_api_base_never_gets_the_provider_key_from_the_environment(
    server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without api_key_env litellm would send $OPENAI_API_KEY to whatever api_base the config names."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    client = LLMClient(LLMConfig(model="openai/x", api_base=server.url, max_retries=0), cache_dir=tmp_path)
    assert client.complete([{"role": "user", "content": "hi"}]).ok
    assert server.seen == [f"Bearer {secrets.NO_KEY}"]  # type: ignore[attr-defined]


def test_an_embedding_api_base_never_gets_the_provider_key(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from composer.embedding.remote import LiteLLMEmbedder

    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    seen: list[str] = []
    import litellm

    real = litellm.embedding

    def spy(**kwargs: object) -> object:
        seen.append(str(kwargs.get("api_key")))
        return real(**kwargs)

    monkeypatch.setattr(litellm, "embedding", spy)
    LiteLLMEmbedder("openai/e", api_base=server.url, max_retries=0).encode_queries(["a"])
    assert seen == [secrets.NO_KEY]


def test_an_embedding_key_variable_goes_through_the_policy(server: FakeLLMServer) -> None:
    from composer.embedding.config import EmbeddingConfig
    from composer.embedding.factory import make_embedder

    config = EmbeddingConfig(provider="litellm", model="openai/e", api_base=server.url,
                             api_key_env="AWS_SECRET_ACCESS_KEY")
    with pytest.raises(ConfigError, match="--allow-env AWS_SECRET_ACCESS_KEY") as err:
        make_embedder(config)
    assert err.value.field == "embedding.api_key_env" and server.requests == 0
