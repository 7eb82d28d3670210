"""Tokens and dollars of a request before it is sent: the model's tokenizer and price, as litellm knows
them (its local price map with ``LITELLM_LOCAL_MODEL_COST_MAP=True``), or the configured ``price``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from composer.llm.config import LLMConfig
from composer.llm.sdk import load_litellm


def count_tokens(model: str, messages: Sequence[Mapping[str, Any]]) -> int:
    """Prompt tokens of ``messages`` for ``model``, with its tokenizer where litellm knows it (else
    litellm's default, OpenAI's cl100k), message framing included, as providers bill them."""
    return _count(model, tuple((str(m.get("role", "")), str(m.get("content", ""))) for m in messages))


def count_text_tokens(model: str, text: str) -> int:
    """Tokens of a reply ``text`` for ``model``."""
    return _count_text(model, text)


@lru_cache(maxsize=65536)
def _count(model: str, messages: tuple[tuple[str, str], ...]) -> int:
    rows = [{"role": role, "content": content} for role, content in messages]
    return int(load_litellm().token_counter(model=model, messages=rows))


@lru_cache(maxsize=65536)
def _count_text(model: str, text: str) -> int:
    return int(load_litellm().token_counter(model=model, text=text)) if text else 0


def request_cost(config: LLMConfig, prompt_tokens: float, completion_tokens: float) -> float | None:
    """Dollars for one request of these sizes: the configured price, else litellm's price map; None when
    neither knows the model (a self-hosted one without ``price``)."""
    price = config.token_price()
    if price is not None:
        return price.cost(round(prompt_tokens), round(completion_tokens))
    per_in, per_out = _unit_prices(config.model)
    if per_in is None or per_out is None:
        return None
    return prompt_tokens * per_in + completion_tokens * per_out


@lru_cache(maxsize=256)
def _unit_prices(model: str) -> tuple[float | None, float | None]:
    """Dollars per input and per output token in litellm's price map."""
    try:
        per_in, per_out = load_litellm().cost_per_token(model=model, prompt_tokens=1, completion_tokens=1)
    except Exception:  # litellm raises its own errors for a model it has no price for
        return None, None
    return float(per_in), float(per_out)
