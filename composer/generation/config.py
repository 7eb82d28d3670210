"""Generation settings (a pipeline's ``generation:`` section): who answers, from how many passages."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from composer.generation.prompts import AnswerTemplate
from composer.llm.config import EndpointChecks, LLMConfig, derive_config
from composer.prompts.spec import PromptRef
from composer.settings import Strict

DEFAULT_MAX_TOKENS = LLMConfig.model_fields["max_tokens"].default
HEADER_PARAMS = ("extra_headers", "headers")
"""litellm parameters that set HTTP headers (an ``Authorization`` among them): left out of the config a
trial records and ``composer export`` writes."""


class GenerationConfig(EndpointChecks, Strict):
    """Who answers: ``model`` None is the offline extractive answerer, else a litellm chat model.

    Everything that shapes an answer and where to reach the model live here (and so in an exported
    config): the model, temperature, reply length, sampling parameters, endpoint. How to call it (timeout,
    concurrency, retries, prices) is a property of the run: the experiment's ``llm:`` block, merged in by
    ``llm_config``. ``max_tokens`` and ``params`` left unset are the run's (and are then not written, so
    configs that never set them keep their identity). The key itself never appears: ``api_key_env`` names
    the environment variable that holds it.
    """

    model: str | None = Field(default=None, description="litellm model, e.g. ollama/qwen2.5, openai/gpt-4o")
    template: AnswerTemplate = "grounded"
    prompt: PromptRef | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="The team's own answer prompt, sent instead of `template` when set: {system, user} with "
        "{question}, {contexts} (and {history}: the conversation so far; a follow-up is asked without it "
        "when the prompt has none), variants per language (ar, fa, en, default), a prompt file, or a "
        "registry URI (prompts:/NAME@ALIAS, prompts:/NAME/VERSION). Resolved to its text, pinned to its "
        "version, before anything is sent.",
    )
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_contexts: int = Field(default=5, ge=1, le=50, description="Top hits the LLM answers from.")
    api_base: str | None = None
    api_key_env: str | None = None
    max_tokens: int | None = Field(
        default=None,
        gt=0,
        exclude_if=lambda v: v is None,
        description=f"Longest answer in tokens; unset: the run's llm: block's ({DEFAULT_MAX_TOKENS}).",
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        exclude_if=lambda v: not v,
        description="Further litellm sampling parameters (top_p, seed...); unset: the run's llm: block's.",
    )

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    def llm_config(self, run: LLMConfig | None = None) -> LLMConfig | None:
        """The generator's LLMConfig: this model and endpoint on the run's operational settings."""
        if self.model is None:
            return None
        names = ("api_base", "api_key_env", "max_tokens")
        explicit: dict[str, Any] = {k: v for k in names if (v := getattr(self, k)) is not None}
        if self.params:
            explicit["params"] = dict(self.params)
        base = run if run is not None else LLMConfig(model=self.model)
        return derive_config(base, self.model, temperature=self.temperature, **explicit)

    def resolved(self, run: LLMConfig | None) -> GenerationConfig:
        """This section with what ``run`` supplies to its requests written out (endpoint, key variable,
        reply length, sampling parameters): the config a trial records and ``composer export`` writes, so
        that ``eval --config`` and ``load_pipeline`` send the very requests the trial sent."""
        config = self.llm_config(run)
        if config is None:
            return self
        max_tokens = config.max_tokens if config.max_tokens != DEFAULT_MAX_TOKENS else None
        # Headers reach the endpoint, not the answer, and may hold a credential: never recorded.
        params = {k: v for k, v in config.params.items() if k not in HEADER_PARAMS}
        return GenerationConfig.model_validate(
            {
                **self.model_dump(),
                "api_base": config.api_base,
                "api_key_env": config.api_key_env,
                "max_tokens": max_tokens,
                "params": params,
            }
        )
