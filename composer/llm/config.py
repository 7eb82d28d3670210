"""LLM settings as they appear in experiment files: a model and how to reach it, never the key itself."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from composer.secrets import ENV_NAME, read_key

# Parameters that would smuggle a secret or the endpoint past the fields that handle them.
_RESERVED_PARAMS = frozenset(
    {"api_key", "api_base", "base_url", "model", "messages", "timeout", "num_retries"}
)


class TokenPrice(BaseModel):
    """USD per one million tokens, for self-hosted or unlisted models litellm cannot price."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0)
    output: float = Field(ge=0)

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input + completion_tokens * self.output) / 1_000_000


class EndpointChecks(BaseModel):
    """The checks every block naming an endpoint shares (the generator, ``llm:``, a judge): its key
    variable is a name, never the key, and its extra parameters smuggle no key or endpoint."""

    @field_validator("api_key_env", check_fields=False)
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        return check_env_name(value)

    @field_validator("params", check_fields=False)
    @classmethod
    def _no_reserved(cls, value: dict[str, Any]) -> dict[str, Any]:
        return check_params(value)


class LLMConfig(EndpointChecks):
    """One chat model reached through litellm ("openai/gpt-4o-mini", "ollama/qwen2.5", "openai/x" + api_base).

    ``api_key_env`` names the environment variable holding the key, so configs, MLflow params and logs
    never contain it; the name must be one the user allowed (``composer.secrets``). Without it litellm
    reads the provider's usual variable (OPENAI_API_KEY, ...) for the provider's own endpoint only: with
    ``api_base`` no key from the environment is sent unless ``api_key_env`` names it.
    """

    # A key pasted into the wrong field must not be echoed back in the validation error.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    model: str = Field(min_length=1)
    api_base: str | None = None
    api_key_env: str | None = None
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int | None = Field(default=1024, gt=0)
    timeout: float = Field(
        default=60.0, gt=0, description="seconds per request; raise it for slow local models"
    )
    max_concurrency: int = Field(default=8, ge=1)
    max_retries: int = Field(default=5, ge=0)
    backoff_base: float = Field(default=0.5, ge=0)
    backoff_max: float = Field(default=30.0, ge=0)
    cache: bool = True
    price: TokenPrice | None = None
    prices: dict[str, TokenPrice] = Field(
        default_factory=dict,
        description="price by model name, for studies that sample several self-hosted models; "
        "``price`` wins for this config's own model",
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="extra litellm parameters (top_p, seed, ...)"
    )

    def api_key(self) -> str | None:
        """The key from the named environment variable, if the user allowed that name; a clear error,
        before any request, when it is refused or unset."""
        if self.api_key_env is None:
            return None
        return read_key(self.api_key_env, field="api_key_env")

    def token_price(self) -> TokenPrice | None:
        """The price this model's tokens are charged at, if configured (else litellm's tables decide)."""
        return self.price or self.prices.get(self.model)

    def call_params(self) -> dict[str, Any]:
        """The sampling parameters that shape a reply, and so belong in its cache key."""
        params: dict[str, Any] = {"temperature": self.temperature}
        if self.max_tokens is not None:
            params["max_tokens"] = self.max_tokens
        params.update(self.params)
        return params


def check_params(value: dict[str, Any]) -> dict[str, Any]:
    """Validate extra litellm parameters: none may carry the key, the endpoint or another field's value."""
    clash = sorted(_RESERVED_PARAMS.intersection(value))
    if clash:
        raise ValueError(f"set {', '.join(clash)} through its own field (api_key through api_key_env)")
    return value


def check_env_name(value: str | None) -> str | None:
    """Validate a field that names an environment variable holding a key (``api_key_env``)."""
    if value is not None and not ENV_NAME.match(value):
        # Do not echo the value: it may well be the key pasted into the wrong field.
        raise ValueError("must name an environment variable (e.g. OPENAI_API_KEY), not hold the key")
    return value


def helper_config(llm: LLMConfig | None, helper: LLMConfig | str | None = None) -> LLMConfig | None:
    """The settings of a helper LLM (a judge, an LLM reranker, query expansion), always at temperature 0;
    None when neither a helper nor a generator is set.

    A bare model name keeps the generator's operational settings (timeout, concurrency, retries, cache)
    and, when both use the same litellm provider prefix, its endpoint and key variable too.
    """
    if isinstance(helper, LLMConfig):
        return helper.model_copy(update={"temperature": 0.0})
    if llm is None:
        return LLMConfig(model=helper, temperature=0.0) if helper else None
    return derive_config(llm, helper or llm.model, temperature=0.0)


def derive_config(base: LLMConfig, model: str, **update: Any) -> LLMConfig:
    """Settings for ``model`` on top of ``base``: operational settings (timeout, concurrency, retries,
    cache, price map) carry over; the endpoint, key variable and params only within one litellm provider;
    ``base.price`` only for the same model. ``update`` sets fields explicitly (validated)."""
    data = base.model_dump()
    if model != base.model:
        data.update(model=model, price=None)
        if _provider(model) != _provider(base.model):
            data.update(api_base=None, api_key_env=None, params={})
    return type(base).model_validate({**data, **update})


def _provider(model: str) -> str:
    return model.split("/", 1)[0] if "/" in model else ""
