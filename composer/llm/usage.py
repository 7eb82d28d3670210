"""Tokens, cost and failures of LLM calls, counted per client and per tracked scope (a trial, a batch)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

FailureKind = Literal[
    "rate_limit", "server_error", "timeout", "connection", "bad_response", "oversized", "other"
]
FAILURE_KINDS: tuple[FailureKind, ...] = (
    "rate_limit",
    "server_error",
    "timeout",
    "connection",
    "bad_response",
    "oversized",
    "other",
)


@dataclass
class Usage:
    """Counters for a set of calls. ``calls`` are logical calls; ``requests`` what reached the provider.

    Tokens and cost count every request that reached the provider, failed ones too (a 5xx, a timeout, an
    unparseable or unusable reply: the provider read the prompt all the same); a cached reply costs
    nothing, which is the point of the cache. ``estimated`` counts requests whose tokens were counted
    here because the reply said none (see ``composer.llm.client``).
    ``failed_attempts`` counts every failed request (retried or not), ``failed_calls`` the calls that gave up.
    ``repaired`` counts calls whose unusable reply was fixed by the one repair request, ``cache_rejected``
    cached replies that failed the checks a live reply gets, dropped and asked again.
    """

    calls: int = 0
    cached: int = 0
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    unpriced: int = 0
    repaired: int = 0
    cache_rejected: int = 0
    estimated: int = 0
    failed_attempts: Counter[str] = field(default_factory=Counter)
    failed_calls: Counter[str] = field(default_factory=Counter)
    in_flight: int = 0
    """Requests sent and not answered yet: what a running trial's live view shows."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def record_request(
        self, prompt_tokens: int, completion_tokens: int, cost: float | None, *, estimated: bool = False
    ) -> None:
        with self._lock:
            self._add(prompt_tokens, completion_tokens, cost, estimated)

    def record_failed_attempt(
        self,
        kind: FailureKind,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        cost: float | None = 0.0,
        *,
        estimated: bool = False,
    ) -> None:
        """A failed request, with the tokens the provider read for it (none when it never got it)."""
        with self._lock:
            self._add(prompt_tokens, completion_tokens, cost, estimated)
            self.failed_attempts[kind] += 1

    def _add(self, prompt_tokens: int, completion_tokens: int, cost: float | None, estimated: bool) -> None:
        self.requests += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.estimated += int(estimated)
        if cost is None:
            self.unpriced += 1
        else:
            self.cost += cost

    def record_repaired(self) -> None:
        with self._lock:
            self.repaired += 1

    def record_cache_rejected(self) -> None:
        with self._lock:
            self.cache_rejected += 1

    def record_call(self, *, cached: bool, failed: FailureKind | None) -> None:
        with self._lock:
            self.calls += 1
            self.cached += int(cached)
            if failed is not None:
                self.failed_calls[failed] += 1

    def to_dict(self) -> dict[str, Any]:
        """Flat numbers for MLflow metrics and summary.json."""
        return {
            "llm_calls": self.calls,
            "llm_cached_calls": self.cached,
            "llm_requests": self.requests,
            "llm_prompt_tokens": self.prompt_tokens,
            "llm_completion_tokens": self.completion_tokens,
            "llm_total_tokens": self.total_tokens,
            "llm_cost_usd": round(self.cost, 8),
            "llm_unpriced_requests": self.unpriced,
            "llm_failed_calls": sum(self.failed_calls.values()),
            "llm_repaired_calls": self.repaired,
            "llm_cache_rejected": self.cache_rejected,
            "llm_estimated_requests": self.estimated,
        }

    def error_rates(self) -> dict[str, Any]:
        """The content of error_rates.json: every failure kind, per request and per call."""
        kinds = {
            kind: {
                "failed_requests": self.failed_attempts[kind],
                "request_rate": _rate(self.failed_attempts[kind], self.requests),
                "failed_calls": self.failed_calls[kind],
                "call_rate": _rate(self.failed_calls[kind], self.calls),
            }
            for kind in FAILURE_KINDS
        }
        failed = sum(self.failed_calls.values())
        return {
            "calls": self.calls,
            "requests": self.requests,
            "failed_calls": failed,
            "call_failure_rate": _rate(failed, self.calls),
            "failed_requests": sum(self.failed_attempts.values()),
            "repaired_calls": self.repaired,
            "cache_rejected": self.cache_rejected,
            "kinds": kinds,
        }


def _rate(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


@contextmanager
def sending(usages: Sequence[Usage]) -> Iterator[None]:
    """Count one request in flight on each of ``usages`` while it is out."""
    for u in usages:
        with u._lock:
            u.in_flight += 1
    try:
        yield
    finally:
        for u in usages:
            with u._lock:
                u.in_flight -= 1


_TRACKERS: ContextVar[tuple[Usage, ...]] = ContextVar("composer_llm_usage", default=())


@contextmanager
def track_usage() -> Iterator[Usage]:
    """Count every LLM call made in this context (and the tasks it starts) into a fresh Usage.

    Scopes nest, so a study can track a trial while the trial tracks its judge calls.
    """
    usage = Usage()
    token = _TRACKERS.set((*_TRACKERS.get(), usage))
    try:
        yield usage
    finally:
        _TRACKERS.reset(token)


def active_trackers() -> tuple[Usage, ...]:
    return _TRACKERS.get()
