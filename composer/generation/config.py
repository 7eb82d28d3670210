"""Generation settings (a pipeline's ``generation:`` section): who answers, from how many passages."""

from __future__ import annotations

from pydantic import ConfigDict, Field, field_validator

from composer.generation.prompts import AnswerTemplate
from composer.llm.config import LLMConfig, check_env_name, derive_config
from composer.settings import Strict


class GenerationConfig(Strict):
    """Who answers: ``model`` None is the offline extractive answerer, else a litellm chat model.

    Only what shapes an answer and where to reach the model live here (and so in an exported config);
    how to call it (timeout, concurrency, retries, prices) is a property of the run: the experiment's
    ``llm:`` block, merged in by ``llm_config``. The key itself never appears: ``api_key_env`` names the
    environment variable that holds it.
    """

    model: str | None = Field(default=None, description="litellm model, e.g. ollama/qwen2.5, openai/gpt-4o")
    template: AnswerTemplate = "grounded"
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_contexts: int = Field(default=5, ge=1, le=50, description="Top hits the LLM answers from.")
    api_base: str | None = None
    api_key_env: str | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        return check_env_name(value)

    def llm_config(self, run: LLMConfig | None = None) -> LLMConfig | None:
        """The generator's LLMConfig: this model and endpoint on the run's operational settings."""
        if self.model is None:
            return None
        explicit = {k: v for k in ("api_base", "api_key_env") if (v := getattr(self, k)) is not None}
        base = run if run is not None else LLMConfig(model=self.model)
        return derive_config(base, self.model, temperature=self.temperature, **explicit)
