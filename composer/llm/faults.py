"""What went wrong with a request (so it is retried or counted by kind), and keeping keys out of messages."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
from email.utils import parsedate_to_datetime

from composer.llm.usage import FailureKind

RETRYABLE: frozenset[FailureKind] = frozenset(
    {"rate_limit", "server_error", "timeout", "connection", "bad_response"}
)

_TIMEOUT_NAMES = frozenset(
    {"Timeout", "APITimeoutError", "TimeoutException", "ReadTimeout", "ConnectTimeout"}
)
_CONNECTION_NAMES = frozenset(
    {
        "APIConnectionError",
        "ConnectError",
        "ClientConnectorError",
        "ServerDisconnectedError",
        "RemoteProtocolError",
    }
)


class BadResponse(Exception):
    """A reply that arrived but cannot be used: empty, or rejected by the caller's validator."""


def classify(exc: BaseException) -> FailureKind:
    """The failure kind of an exception from litellm, looking through its chain of causes.

    litellm wraps a refused connection and an unparseable body alike as InternalServerError (500), so the
    chain, not the outer type, tells a connection problem or a malformed reply from a real server error.
    """
    chain = _chain(exc)
    names = {cls.__name__ for e in chain for cls in type(e).__mro__}
    if names & _TIMEOUT_NAMES or any(isinstance(e, (TimeoutError, asyncio.TimeoutError)) for e in chain):
        return "timeout"
    if any(isinstance(e, (BadResponse, json.JSONDecodeError)) for e in chain) or "no 'choices'" in str(exc):
        return "bad_response"
    if names & _CONNECTION_NAMES or any(isinstance(e, ConnectionError) for e in chain):
        return "connection"
    root = chain[-1]
    if type(root).__name__ == "OpenAIError" and type(root).__module__.startswith("openai"):
        return "other"  # raised by the SDK before any request (e.g. no key): litellm still calls it a 500
    status = getattr(exc, "status_code", None)
    if status == 429 or "RateLimitError" in names:
        return "rate_limit"
    if isinstance(status, int) and status >= 500:
        return "server_error"
    return "other"


def retry_after(exc: BaseException) -> float | None:
    """Seconds the provider asked us to wait (Retry-After: seconds or an HTTP date), if it said."""
    for e in _chain(exc):
        for headers in (
            getattr(e, "litellm_response_headers", None),
            getattr(getattr(e, "response", None), "headers", None),
        ):
            items = getattr(headers, "items", None)
            if items is None:
                continue
            value = next((v for k, v in items() if str(k).lower() == "retry-after"), None)
            if value:
                return _parse_retry_after(str(value))
    return None


def _parse_retry_after(value: str) -> float | None:
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not e for e in out):
        out.append(current)
        current = current.__cause__ or current.__context__
    return out


# -- secrets --

_KEY_SHAPES = re.compile(
    r"\bsk-[A-Za-z0-9_\-]{6,}"  # OpenAI-style keys, also when a provider echoes one back
    r"|(?<=Bearer )[A-Za-z0-9_\-.=]{8,}"
    r"|(?<=api_key=)[A-Za-z0-9_\-.]{8,}|(?<=api-key: )[A-Za-z0-9_\-.]{8,}",
    re.IGNORECASE,
)
_SECRETS: set[str] = set()
_SECRETS_LOCK = threading.Lock()


def register_secret(value: str | None) -> None:
    """Remember a key so that ``scrub`` and the log filter remove it wherever it would appear."""
    if value and len(value) >= 4:
        with _SECRETS_LOCK:
            _SECRETS.add(value)
        _install_log_filter()


def scrub(text: str) -> str:
    """``text`` with every registered key and anything shaped like a key replaced by ***."""
    with _SECRETS_LOCK:
        secrets = sorted(_SECRETS, key=len, reverse=True)
    for secret in secrets:
        text = text.replace(secret, "***")
    return _KEY_SHAPES.sub("***", text)


class _ScrubFilter(logging.Filter):
    """Rewrites records of litellm's and the HTTP stack's loggers so no key reaches a handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


_FILTER = _ScrubFilter()
_LOGGERS = ("LiteLLM", "LiteLLM Proxy", "LiteLLM Router", "litellm", "httpx", "httpcore", "openai", "aiohttp")


def _install_log_filter() -> None:
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
