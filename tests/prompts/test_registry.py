"""A team's prompt in MLflow's Prompt Registry, in the test's own SQLite store: registered, loaded by alias
or version and pinned to it, readable by MLflow alone, and each URI that does not resolve one error."""

from __future__ import annotations

from pathlib import Path

import pytest

from composer.errors import ConfigError
from composer.prompts import UserPrompt, load_registered, register_prompt, resolve_prompt, set_alias

SINGLE = UserPrompt(system="Cite as [1]. {{not a field}}", user="Passages:\n{contexts}\nQuestion: {question}")
LANGS = UserPrompt.model_validate({
    "ar": {"system": "أجب بالعربية.", "user": "{contexts}\n{question}"},
    "en": {"system": "Answer in English.", "user": "{contexts}\n{question}"},
})


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = f"sqlite:///{tmp_path_factory.mktemp('registry') / 'mlflow.db'}"
    first = register_prompt("answers", SINGLE, tags={"team": "search"}, tracking_uri=uri)
    assert first == "prompts:/answers/1"
    assert register_prompt("answers", LANGS, commit_message="per language", tracking_uri=uri) == \
        "prompts:/answers/2"
    set_alias("answers", "champion", 1, tracking_uri=uri)
    return uri


def test_an_alias_loads_its_version_pinned(store: str) -> None:
    loaded = load_registered("prompts:/answers@champion", store)
    assert (loaded.source, loaded.version) == ("prompts:/answers/1", 1)
    assert loaded.sha256 == SINGLE.sha256 and loaded.default == SINGLE.default


def test_every_language_variant_comes_back_from_one_version(store: str) -> None:
    loaded = resolve_prompt("prompts:/answers/2", base=None, tracking_uri=store, field="generation.prompt")
    assert loaded.variants() == LANGS.variants() and loaded.source == "prompts:/answers/2"


def test_a_single_variant_prompt_is_an_mlflow_chat_prompt_anyone_can_format(store: str) -> None:
    import mlflow

    mlflow.set_tracking_uri(store)
    try:
        messages = mlflow.genai.load_prompt("prompts:/answers/1").format(question="Q?", contexts="[1] c")
    finally:
        mlflow.set_tracking_uri(None)  # type: ignore[arg-type]
    assert messages == [{"role": "system", "content": "Cite as [1]. {not a field}"},
                        {"role": "user", "content": "Passages:\n[1] c\nQuestion: Q?"}]


@pytest.mark.parametrize("uri", ["prompts:/nope@champion", "prompts:/answers@nope", "prompts:/answers/9",
                                 "prompts:/answers"])
def test_a_uri_that_does_not_resolve_is_one_error_naming_the_field(store: str, uri: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_registered(uri, store, field="dimensions.generation.prompt.choices[1]")
    assert caught.value.field == "dimensions.generation.prompt.choices[1]"
    assert "\n" not in str(caught.value)


def test_a_store_that_does_not_exist_is_an_error_and_is_not_created(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no MLflow store"):
        load_registered("prompts:/answers@champion", f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert list(tmp_path.iterdir()) == []


def test_the_registry_s_error_reaches_the_message_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow's first error line may name the store's URL with its password, or a key: both masked."""
    import mlflow

    def fails(self: object, uri: str) -> None:
        raise RuntimeError("no postgresql://team:hunter2@db/mlflow with sk-abcdefghijklmnopqrstuvwx")

    monkeypatch.setattr(mlflow.MlflowClient, "load_prompt", fails)
    with pytest.raises(ConfigError) as caught:
        load_registered("prompts:/answers@prod", "http://127.0.0.1:9", field="generation.prompt")
    message = str(caught.value)
    assert "hunter2" not in message and "sk-abc" not in message
    assert "postgresql://***@db/mlflow" in message and "does not resolve" in message
