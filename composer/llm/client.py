"""The async LLM client every Composer call goes through: litellm with bounds, retries, cache and accounting.

- bounded concurrency: at most ``max_concurrency`` requests in flight per client and event loop;
- retries with exponential backoff and jitter on rate limits, 5xx, timeouts, dropped connections and
  unusable replies, honouring Retry-After (which also pauses the client's other requests: a 429 means the
  whole client is too fast, not one request);
- a SQLite cache keyed by (model, endpoint, messages, sampling parameters): reruns cost nothing;
- tokens, cost and failures by kind, on the client and on every active ``track_usage`` scope.
A call never raises for a provider failure: it returns a Result with ``error_kind`` set, so one bad
sample cannot fail a trial.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from composer.llm.cache import CachedReply, LLMCache, cache_key
from composer.llm.config import LLMConfig
from composer.llm.faults import RETRYABLE, BadResponse, classify, register_secret, retry_after, scrub
from composer.llm.sync import run_sync
from composer.llm.usage import FailureKind, Usage, active_trackers

Message = Mapping[str, Any]
Messages = Sequence[Message]
Validator = Callable[[str], object]

DEFAULT_CACHE_DIR = Path(".composer") / "cache" / "llm"
RETRY_AFTER_MAX = 600.0
"""Seconds: a provider's Retry-After is honoured beyond backoff_max, up to this sanity bound."""


@dataclass(frozen=True)
class Result:
    """One call's outcome: the reply text, or why there is none."""

    text: str | None
    error_kind: FailureKind | None = None
    error: str | None = None
    cached: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = 0.0
    attempts: int = 0
    latency: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error_kind is None


def _litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price-map download at import
    import litellm

    litellm.suppress_debug_info = True
    return litellm


class LLMClient:
    """Calls one configured model. Share one client per model across a study: it holds the counters."""

    def __init__(self, config: LLMConfig, *, cache_dir: str | Path | None = None) -> None:
        self.config = config
        self._api_key = config.api_key()
        register_secret(self._api_key)
        self.cache = (
            LLMCache(Path(cache_dir or DEFAULT_CACHE_DIR) / "replies.sqlite") if config.cache else None
        )
        self.usage = Usage()
        self._semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self._cooldown_until = 0.0

    def __repr__(self) -> str:
        cfg = self.config
        return f"LLMClient(model={cfg.model!r}, api_base={cfg.api_base!r}, cache={self.cache is not None})"

    # -- public API --

    async def acomplete(
        self, messages: Messages, *, validate: Validator | None = None, **params: Any
    ) -> Result:
        """One chat completion. ``params`` override the config's sampling parameters for this call.

        ``validate(text)`` may raise ValueError for a reply the caller cannot use (e.g. unparseable JSON):
        such a reply is retried like a failure and never cached.
        """
        call_params = {**self.config.call_params(), **params}
        key = cache_key(self.config.model, self.config.api_base, messages, call_params)
        started = time.perf_counter()
        hit = self._cached(key, validate)
        if hit is not None:
            self._record_call(cached=True, failed=None)
            return Result(
                hit.text,
                cached=True,
                prompt_tokens=hit.prompt_tokens,
                completion_tokens=hit.completion_tokens,
                cost=0.0,
                latency=time.perf_counter() - started,
            )
        result = await self._call_with_retries(list(messages), call_params, validate)
        result = replace(result, latency=time.perf_counter() - started)
        if result.ok and self.cache is not None and result.text is not None:
            self.cache.put(
                key,
                self.config.model,
                CachedReply(result.text, result.prompt_tokens, result.completion_tokens, result.cost),
            )
        self._record_call(cached=False, failed=result.error_kind)
        return result

    async def acomplete_many(
        self, batch: Sequence[Messages], *, validate: Validator | None = None, **params: Any
    ) -> list[Result]:
        return list(await asyncio.gather(*(self.acomplete(m, validate=validate, **params) for m in batch)))

    def complete(self, messages: Messages, *, validate: Validator | None = None, **params: Any) -> Result:
        return run_sync(self.acomplete(messages, validate=validate, **params))

    def complete_many(
        self, batch: Sequence[Messages], *, validate: Validator | None = None, **params: Any
    ) -> list[Result]:
        """The sync facade for batch use: all calls concurrently, within the concurrency bound."""
        return run_sync(self.acomplete_many(batch, validate=validate, **params))

    # -- internals --

    def _cached(self, key: str, validate: Validator | None) -> CachedReply | None:
        if self.cache is None:
            return None
        hit = self.cache.get(key)
        if hit is None or validate is None:
            return hit
        try:
            validate(hit.text)
        except ValueError:
            return None  # a reply cached by a laxer caller: ask again
        return hit

    def _semaphore(self) -> asyncio.Semaphore:
        """One semaphore per event loop: asyncio primitives are bound to the loop that first uses them."""
        loop = asyncio.get_running_loop()
        sem = self._semaphores.get(loop)
        if sem is None:
            sem = self._semaphores[loop] = asyncio.Semaphore(self.config.max_concurrency)
        return sem

    async def _call_with_retries(
        self, messages: list[Message], params: dict[str, Any], validate: Validator | None
    ) -> Result:
        cfg = self.config
        _litellm()  # import (seconds, once) before any timeout starts counting
        attempt = 0
        while True:
            attempt += 1
            try:
                async with self._semaphore():
                    await self._wait_cooldown()  # inside: calls queued on the semaphore must wait too
                    response = await asyncio.wait_for(self._request(messages, params), cfg.timeout + 5.0)
                text, prompt_tokens, completion_tokens = _reply(response)
                if validate is not None:
                    try:
                        validate(text)
                    except ValueError as exc:
                        raise BadResponse(f"unusable reply: {exc}") from exc
            except Exception as exc:
                kind = classify(exc)
                self._record_failed_attempt(kind)
                if kind not in RETRYABLE or attempt > cfg.max_retries:
                    return Result(None, kind, _describe(exc), attempts=attempt)
                await asyncio.sleep(self._delay(kind, attempt, exc))
                continue
            cost = self._cost(response, prompt_tokens, completion_tokens)
            self._record_request(prompt_tokens, completion_tokens, cost)
            return Result(
                text,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                cost=cost,
                attempts=attempt,
            )

    async def _request(self, messages: list[Message], params: dict[str, Any]) -> Any:
        cfg = self.config
        kwargs: dict[str, Any] = dict(params)
        if cfg.api_base:
            kwargs["api_base"] = cfg.api_base
        if self._api_key:
            kwargs["api_key"] = self._api_key
        elif cfg.api_base and cfg.model.startswith("openai/") and not os.environ.get("OPENAI_API_KEY"):
            kwargs["api_key"] = (
                "no-key"  # keyless OpenAI-compatible servers (vLLM, llama.cpp): the SDK wants one
            )
        # Retries are ours (counted, Retry-After aware); litellm's and the OpenAI SDK's are switched off.
        return await _litellm().acompletion(
            model=cfg.model, messages=messages, timeout=cfg.timeout, num_retries=0, max_retries=0, **kwargs
        )

    def _delay(self, kind: FailureKind, attempt: int, exc: BaseException) -> float:
        """Exponential backoff with jitter; a provider's Retry-After wins and pauses the whole client."""
        cfg = self.config
        if kind == "bad_response":
            return 0.0  # the provider is fine; ask again at once
        wanted = retry_after(exc) if kind == "rate_limit" else None
        if wanted is not None:
            delay = min(wanted, RETRY_AFTER_MAX) + random.uniform(0, 0.1 * max(wanted, 0.1))
            self._cooldown_until = max(self._cooldown_until, time.monotonic() + delay)
            return delay
        ceiling = min(cfg.backoff_max, cfg.backoff_base * 2 ** (attempt - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    async def _wait_cooldown(self) -> None:
        """Sleep out the pause; a 429 that arrives meanwhile may extend it, so look again on waking."""
        while (pause := self._cooldown_until - time.monotonic()) > 0:
            await asyncio.sleep(pause)

    def _cost(self, response: Any, prompt_tokens: int, completion_tokens: int) -> float | None:
        """The configured price, else the cost litellm computed from its price table; None if unknown."""
        price = self.config.token_price()
        if price is not None:
            return price.cost(prompt_tokens, completion_tokens)
        hidden = getattr(response, "_hidden_params", None) or {}
        cost = hidden.get("response_cost") if hasattr(hidden, "get") else None
        return float(cost) if cost is not None else None

    def _usages(self) -> tuple[Usage, ...]:
        return (self.usage, *active_trackers())

    def _record_request(self, prompt_tokens: int, completion_tokens: int, cost: float | None) -> None:
        for u in self._usages():
            u.record_request(prompt_tokens, completion_tokens, cost)

    def _record_failed_attempt(self, kind: FailureKind) -> None:
        for u in self._usages():
            u.record_failed_attempt(kind)

    def _record_call(self, *, cached: bool, failed: FailureKind | None) -> None:
        for u in self._usages():
            u.record_call(cached=cached, failed=failed)


def _reply(response: Any) -> tuple[str, int, int]:
    """Text and token counts of a litellm ModelResponse; an empty or missing reply is a BadResponse."""
    try:
        text = response.choices[0].message.content
    except (AttributeError, IndexError, TypeError) as exc:
        raise BadResponse("reply without a message") from exc
    if not isinstance(text, str) or not text.strip():
        raise BadResponse("empty reply")
    usage = getattr(response, "usage", None)
    prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
    completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
    return text, prompt_tokens, completion_tokens


def _describe(exc: BaseException) -> str:
    """A one-line, key-free description of the failure for reasons, logs and error_rates.json."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    return scrub(f"{type(exc).__name__}: {message}")[:500]
