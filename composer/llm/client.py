"""The async LLM client every Composer call goes through: litellm with bounds, retries, cache and accounting.

- bounded concurrency: at most ``max_concurrency`` requests in flight per client and event loop;
- retries with exponential backoff and jitter on rate limits, 5xx, timeouts, dropped connections and
  malformed bodies, honouring Retry-After (which also pauses the client's other requests: a 429 means the
  whole client is too fast, not one request);
- an unusable reply (empty, an echo of the prompt, rejected by the caller's validator, longer than
  max_tokens allow) is asked once more with a repair instruction, never identically;
- replies read up to a bound derived from max_tokens (``composer.llm.transport``): a server that ignores
  max_tokens cannot fill the memory;
- a SQLite cache keyed by (model, endpoint, messages, sampling parameters): reruns cost nothing; a cached
  row is checked as a live reply is, and a bad one dropped and asked again;
- tokens, cost and failures by kind, on the client and on every active ``track_usage`` scope: the tokens
  of every request the provider read, failed, retried and unusable ones too (``LLMClient._tokens``).
A call never raises for a provider failure: it returns a Result with ``error_kind`` set, so one bad
sample cannot fail a trial.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import warnings
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from composer.llm.cache import CachedReply, DamagedRow, LLMCache, cache_key
from composer.llm.config import LLMConfig
from composer.llm.faults import (
    RETRYABLE,
    BadResponse,
    ReplyTooLarge,
    UnusableReply,
    classify,
    reached_provider,
    register_secret,
    retry_after,
    scrub,
    unusable,
)
from composer.llm.pricing import count_text_tokens, count_tokens, request_cost
from composer.llm.prompt import PromptLanguage, prompt_language
from composer.llm.sdk import load_litellm
from composer.llm.sync import run_sync
from composer.llm.usage import FailureKind, Usage, active_trackers, sending
from composer.secrets import NO_KEY

Message = Mapping[str, Any]
Messages = Sequence[Message]
Validator = Callable[[str], object]
log = logging.getLogger(__name__)
# litellm builds a call's coroutine in an executor thread; a call cancelled meanwhile (a run past its
# failure budget stops paying) leaves that coroutine unstarted, and Python warns when it is collected.
# Nothing was sent and nothing is lost: the warning is noise on the user's terminal.
warnings.filterwarnings(
    "ignore", message=r"coroutine '\w+\.acompletion' was never awaited", category=RuntimeWarning
)

DEFAULT_CACHE_DIR = Path(".composer") / "cache" / "llm"
RETRY_AFTER_MAX = 600.0
"""Seconds: a provider's Retry-After is honoured beyond backoff_max, up to this sanity bound."""
ECHO_MIN_CHARS = 80
"""A reply holding the whole user message (of at least this many characters) repeats the prompt."""
REPAIR: dict[PromptLanguage, str] = {
    "ar": "تعذّر استخدام ردّك السابق ($reason). أجب مرة أخرى بالتنسيق المطلوب تمامًا وبإيجاز، "
    "ولا تكرّر السؤال أو التعليمات.",
    "fa": "پاسخ قبلی شما قابل استفاده نبود ($reason). دوباره دقیقاً در قالب خواسته‌شده و کوتاه پاسخ دهید "
    "و پرسش یا دستورها را تکرار نکنید.",
    "en": "Your previous reply could not be used ($reason). Answer again, briefly and exactly in the "
    "format asked for, without repeating the question or the instructions.",
}
"""The repair instruction added, as a user message, to a request whose reply was unusable."""


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


class LLMClient:
    """Calls one configured model. Share one client per model across a study: it holds the counters."""

    def __init__(
        self, config: LLMConfig, *, cache_dir: str | Path | None = None, caches: str | None = None
    ) -> None:
        """``caches``: a PostgreSQL URL whose table holds the replies instead of ``cache_dir``'s file."""
        self.config = config
        self._api_key = config.api_key()
        register_secret(self._api_key)
        self.cache = (
            LLMCache(Path(cache_dir or DEFAULT_CACHE_DIR) / "replies.sqlite", caches=caches)
            if config.cache else None
        )
        self.usage = Usage()
        self._semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self._cooldown_until = 0.0
        self._warned_damaged = False

    def __repr__(self) -> str:
        cfg = self.config
        return f"LLMClient(model={cfg.model!r}, api_base={cfg.api_base!r}, cache={self.cache is not None})"

    # -- public API --

    async def acomplete(
        self, messages: Messages, *, validate: Validator | None = None, **params: Any
    ) -> Result:
        """One chat completion. ``params`` override the config's sampling parameters for this call.

        ``validate(text)`` may raise ValueError for a reply the caller cannot use (e.g. unparseable JSON):
        such a reply is asked once more with a repair instruction, and never cached.
        """
        call_params = {**self.config.call_params(), **params}
        key = cache_key(self.config.model, self.config.api_base, messages, call_params)
        started = time.perf_counter()
        hit = self._cached(key, messages, call_params, validate)
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

    def astream(self, messages: Messages, **params: Any) -> ReplyStream:
        """One chat completion streamed: iterate the returned ``ReplyStream`` for the text as the provider
        sends it; its ``result`` (text, tokens, or why it failed) is set once the iteration ends.

        Counted, bounded and redacted as ``acomplete`` is. A failure before the first piece is retried as
        there; after it, the stream ends and ``result`` says why (what was sent cannot be taken back, nor
        repaired). A reply is cached once it is whole and usable, under ``acomplete``'s key, and a cached one
        comes as a single piece: a streamed answer and a plain one share the cache.
        """
        return ReplyStream(self._stream(list(messages), {**self.config.call_params(), **params}))

    # -- internals --

    async def _stream(self, messages: list[Message], params: dict[str, Any]) -> AsyncIterator[str | Result]:
        """``astream``'s pieces, then its Result as the last item."""
        cfg = self.config
        key = cache_key(cfg.model, cfg.api_base, messages, params)
        started = time.perf_counter()
        hit = self._cached(key, messages, params, None)
        if hit is not None:
            self._record_call(cached=True, failed=None)
            yield hit.text
            yield Result(hit.text, cached=True, prompt_tokens=hit.prompt_tokens,
                         completion_tokens=hit.completion_tokens, cost=0.0,
                         latency=time.perf_counter() - started)
            return
        load_litellm()
        streaming = {**params, "stream": True, "stream_options": {"include_usage": True}}
        attempt = 0
        pieces: list[str] = []
        while True:
            attempt += 1
            counted: Any = None  # the chunk that carries the reply's usage
            try:
                async with self._semaphore():
                    await self._wait_cooldown()
                    with sending(self._usages()):
                        stream = await asyncio.wait_for(self._request(messages, streaming), cfg.timeout + 5.0)
                        async for chunk in stream:
                            counted = chunk if getattr(chunk, "usage", None) else counted
                            piece = _delta(chunk)
                            if piece:
                                pieces.append(piece)
                                yield piece
                text = "".join(pieces)
                _check_text(text, messages, params, None)
            except Exception as exc:
                kind = classify(exc)
                reached = bool(pieces) or reached_provider(exc, kind)
                self._record_failed_attempt(kind, *(self._tokens(messages, counted, "".join(pieces))
                                                    if reached else ()))
                if pieces or kind not in RETRYABLE or attempt > cfg.max_retries or unusable(exc) is not None:
                    self._record_call(cached=False, failed=kind)
                    yield Result(None, kind, _describe(exc), attempts=attempt,
                                 latency=time.perf_counter() - started)
                    return
                await asyncio.sleep(self._delay(kind, attempt, exc))
                continue
            prompt_tokens, completion_tokens, cost, estimated = self._tokens(messages, counted, text)
            for u in self._usages():
                u.record_request(prompt_tokens, completion_tokens, cost, estimated=estimated)
            if self.cache is not None:
                self.cache.put(key, cfg.model, CachedReply(text, prompt_tokens, completion_tokens, cost))
            self._record_call(cached=False, failed=None)
            yield Result(text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, cost=cost,
                         attempts=attempt, latency=time.perf_counter() - started)
            return

    def _cached(
        self, key: str, messages: Messages, params: Mapping[str, Any], validate: Validator | None
    ) -> CachedReply | None:
        """The cached reply, checked as a live one is; a bad row is dropped and counted (asked again)."""
        if self.cache is None:
            return None
        try:
            hit = self.cache.get(key)
            if hit is not None:
                _check_text(hit.text, messages, params, validate)
        except (DamagedRow, UnusableReply) as exc:
            if not isinstance(exc, DamagedRow):
                self.cache.drop(key)  # e.g. cached by an older version or a laxer caller
            for u in self._usages():
                u.record_cache_rejected()
            if not self._warned_damaged:
                self._warned_damaged = True
                log.warning(
                    "%s: a cached reply is unusable (%s): dropped and asked again; such rows are counted "
                    "as cache_rejected in error_rates.json", self.cache.where, exc
                )
            return None
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
        load_litellm()  # import (seconds, once) before any timeout starts counting
        attempt = 0
        request, repairing = messages, False
        while True:
            attempt += 1
            response: Any = None
            text: str | None = None
            try:
                async with self._semaphore():
                    await self._wait_cooldown()  # inside: calls queued on the semaphore must wait too
                    with sending(self._usages()):
                        response = await asyncio.wait_for(self._request(request, params), cfg.timeout + 5.0)
                text = _reply(response)
                _check_text(text, messages, params, validate)
            except Exception as exc:
                kind = classify(exc)
                if response is not None or reached_provider(exc, kind):
                    self._record_failed_attempt(kind, *self._tokens(request, response, text))
                else:
                    self._record_failed_attempt(kind)
                bad = unusable(exc)
                if kind not in RETRYABLE or attempt > cfg.max_retries or (bad is not None and repairing):
                    return Result(None, kind, _describe(bad or exc), attempts=attempt)
                if bad is not None:  # the same request would get the same reply: ask once, differently
                    request, repairing = [*messages, _repair(messages, bad)], True
                    continue
                await asyncio.sleep(self._delay(kind, attempt, exc))
                continue
            prompt_tokens, completion_tokens, cost, estimated = self._tokens(request, response, text)
            for u in self._usages():
                u.record_request(prompt_tokens, completion_tokens, cost, estimated=estimated)
            if repairing:
                for u in self._usages():
                    u.record_repaired()
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
        elif cfg.api_base:
            # Never the provider's usual variable (OPENAI_API_KEY...), which litellm would otherwise send
            # to this endpoint: with api_base the key is the one api_key_env names, or none at all.
            kwargs["api_key"] = NO_KEY
        from composer.llm.transport import body_limit, reply_limit, sdk_client

        if cfg.model.startswith("openai/"):  # OpenAI-compatible: read through the bounded transport
            kwargs["client"] = sdk_client(kwargs.get("api_key"), cfg.api_base)
        # Retries are ours (counted, Retry-After aware); litellm's and the OpenAI SDK's are switched off.
        with reply_limit(body_limit(params.get("max_tokens"))):
            return await load_litellm().acompletion(
                model=cfg.model,
                messages=messages,
                timeout=cfg.timeout,
                num_retries=0,
                max_retries=0,
                **kwargs,
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

    def _tokens(
        self, request: Messages, response: Any, text: str | None
    ) -> tuple[int, int, float | None, bool]:
        """Prompt and completion tokens of a request the provider read, its cost, and whether the tokens
        were estimated: the reply's ``usage`` where it has one; else the request counted with the model's
        tokenizer (``count_tokens``) and the reply text, if any came, with ``count_text_tokens``, so that
        failed, retried and unparseable requests count too. Cost: the configured price, else litellm's
        (from the reply, or from its price map for estimated tokens); None where neither knows the model."""
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        estimated = not prompt_tokens
        if estimated:
            model = self.config.model
            prompt_tokens = count_tokens(model, request)
            completion_tokens = count_text_tokens(model, text or "")
        hidden = getattr(response, "_hidden_params", None) or {}
        reported = hidden.get("response_cost") if hasattr(hidden, "get") else None
        if self.config.token_price() is None and not estimated and reported is not None:
            cost: float | None = float(reported)
        else:
            cost = request_cost(self.config, prompt_tokens, completion_tokens)
        return prompt_tokens, completion_tokens, cost, estimated

    def _usages(self) -> tuple[Usage, ...]:
        return (self.usage, *active_trackers())

    def _record_failed_attempt(
        self, kind: FailureKind, prompt_tokens: int = 0, completion_tokens: int = 0,
        cost: float | None = 0.0, estimated: bool = False,
    ) -> None:
        for u in self._usages():
            u.record_failed_attempt(kind, prompt_tokens, completion_tokens, cost, estimated=estimated)

    def _record_call(self, *, cached: bool, failed: FailureKind | None) -> None:
        for u in self._usages():
            u.record_call(cached=cached, failed=failed)


class ReplyStream:
    """A streamed reply (``LLMClient.astream``): async-iterate it for the text's pieces; ``result`` is the
    call's Result once the iteration has ended (None before)."""

    def __init__(self, items: AsyncIterator[str | Result]) -> None:
        self._items = items
        self.result: Result | None = None

    async def __aiter__(self) -> AsyncIterator[str]:
        async for item in self._items:
            if isinstance(item, Result):
                self.result = item
            else:
                yield item


def _delta(chunk: Any) -> str:
    """The text a streamed chunk adds (empty for the role, usage and finish chunks)."""
    try:
        content = chunk.choices[0].delta.content
    except (AttributeError, IndexError, TypeError):
        return ""
    return content if isinstance(content, str) else ""


def _reply(response: Any) -> str:
    """The text of a litellm ModelResponse; a missing or empty reply is a BadResponse."""
    try:
        text = response.choices[0].message.content
    except (AttributeError, IndexError, TypeError) as exc:
        raise BadResponse("reply without a message") from exc
    if not isinstance(text, str):
        raise UnusableReply("empty reply")
    return text


def _check_text(text: str, messages: Messages, params: Mapping[str, Any], validate: Validator | None) -> None:
    """Raise UnusableReply for a reply nobody can use: empty, longer than max_tokens allow, the prompt
    repeated, or rejected by ``validate``. Live and cached replies alike go through here."""
    from composer.llm.transport import text_limit

    if not text.strip():
        raise UnusableReply("empty reply")
    limit = text_limit(params.get("max_tokens"))
    if len(text) > limit:
        raise ReplyTooLarge(f"the reply has {len(text)} characters, more than the {limit} max_tokens allow")
    prompt = _last_user_text(messages)
    if len(prompt) >= ECHO_MIN_CHARS and prompt in " ".join(text.split()):
        raise UnusableReply("the reply repeats the prompt")
    if validate is not None:
        try:
            validate(text)
        except ValueError as exc:
            raise UnusableReply(f"unusable reply: {exc}") from exc


def _last_user_text(messages: Messages) -> str:
    """The last user message, whitespace folded (empty when it is not plain text)."""
    for m in reversed(messages):
        if m.get("role") == "user":
            content = m.get("content")
            return " ".join(content.split()) if isinstance(content, str) else ""
    return ""


def _repair(messages: Messages, bad: UnusableReply) -> dict[str, str]:
    """The user message that asks again for an unusable reply, in the prompt's language."""
    reason = " ".join(str(bad).split())[:200]
    template = REPAIR[prompt_language(_last_user_text(messages))]
    return {"role": "user", "content": template.replace("$reason", reason)}


def _describe(exc: BaseException) -> str:
    """A one-line, key-free description of the failure for reasons, logs and error_rates.json."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    return scrub(f"{type(exc).__name__}: {message}")[:500]
