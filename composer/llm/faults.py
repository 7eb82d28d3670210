"""What went wrong with a request (so it is retried or counted by kind), and keeping keys out of messages."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
from email.utils import parsedate_to_datetime
from typing import Any

from composer.errors import causes
from composer.llm.usage import FailureKind

RETRYABLE: frozenset[FailureKind] = frozenset(
    {"rate_limit", "server_error", "timeout", "connection", "bad_response", "oversized"}
)

READ_BY_PROVIDER: frozenset[FailureKind] = frozenset({"server_error", "timeout", "bad_response", "oversized"})
"""Failures of a request the provider received and read (its prompt evaluated, and billed): an error
status with a body, a timeout once sent, an unparseable or oversized reply. A rate limit, a refused
connection or a request never made cost nothing."""
_CONNECT_TIMEOUT_NAMES = frozenset({"ConnectTimeout", "ConnectionTimeoutError"})

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
    """A reply that arrived but cannot be used: a malformed body, or an unusable reply (below)."""


class UnusableReply(BadResponse):
    """The model's own reply is unusable (empty, an echo of the prompt, rejected by the caller's
    validator): asking the same again at temperature 0 gets the same, so it is asked once with a repair
    instruction instead."""


class ReplyTooLarge(UnusableReply):
    """The reply is longer than its max_tokens allow (a server that ignores the bound): reading stopped."""


def unusable(exc: BaseException) -> UnusableReply | None:
    """The model's unusable reply behind ``exc`` (litellm and the SDK wrap it), if that is the cause."""
    return next((e for e in causes(exc) if isinstance(e, UnusableReply)), None)


def classify(exc: BaseException) -> FailureKind:
    """The failure kind of an exception from litellm, looking through its chain of causes.

    litellm wraps a refused connection and an unparseable body alike as InternalServerError (500), so the
    chain, not the outer type, tells a connection problem or a malformed reply from a real server error.
    """
    chain = list(causes(exc))
    if any(isinstance(e, ReplyTooLarge) for e in chain):
        return "oversized"  # raised while reading: the SDK reports it as a connection error
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
    if isinstance(root, ValueError | TypeError):
        return "other"  # a request the client could not even make (e.g. credentials inside the URL)
    status = getattr(exc, "status_code", None)
    if status == 429 or "RateLimitError" in names:
        return "rate_limit"
    if isinstance(status, int) and status >= 500:
        return "server_error"
    return "other"


def reached_provider(exc: BaseException, kind: FailureKind) -> bool:
    """Whether a request that failed with ``exc`` (of ``kind``) was read by the provider: its tokens
    count. A timeout while connecting was never sent."""
    if kind not in READ_BY_PROVIDER:
        return False
    names = {cls.__name__ for e in causes(exc) for cls in type(e).__mro__}
    return not (kind == "timeout" and names & _CONNECT_TIMEOUT_NAMES)


def retry_after(exc: BaseException) -> float | None:
    """Seconds the provider asked us to wait (Retry-After: seconds or an HTTP date), if it said."""
    for e in causes(exc):
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
    """Remember a key so that ``scrub`` and every log record remove it wherever it would appear."""
    if value and len(value) >= 4:
        with _SECRETS_LOCK:
            _SECRETS.add(value)
        _install_log_scrubbing()


def scrub(text: str) -> str:
    """``text`` with every registered key and anything shaped like a key replaced by ***."""
    with _SECRETS_LOCK:
        secrets = sorted(_SECRETS, key=len, reverse=True)
    for secret in secrets:
        text = text.replace(secret, "***")
    return _KEY_SHAPES.sub("***", text)


_scrubbing_installed = False
_EXCEPTION_FORMATTER = logging.Formatter()


def _install_log_scrubbing() -> None:
    """Scrub each log record as it is created, whatever logger made it and whichever handler gets it.

    Filters on named loggers miss their children (``openai._base_client``, ``httpcore.http11``) and run
    after filters other libraries added first (litellm's turns a key into REDACTED); the record factory
    runs before any filter or handler, in every logger of the process.
    """
    global _scrubbing_installed
    with _SECRETS_LOCK:
        if _scrubbing_installed:
            return
        make_record = logging.getLogRecordFactory()

        def scrubbed_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
            return _scrub_record(make_record(*args, **kwargs))

        logging.setLogRecordFactory(scrubbed_record)
        _scrubbing_installed = True


def _scrub_record(record: logging.LogRecord) -> logging.LogRecord:
    """The record with its message, and the traceback it carries, free of keys."""
    try:
        message = record.getMessage()
    except Exception:
        return record  # a malformed logging call: a handler reports it when it formats the record
    clean = scrub(message)
    if clean != message:
        record.msg, record.args = clean, None
    if record.exc_info and record.exc_info[1] is not None:
        trace = _EXCEPTION_FORMATTER.formatException(record.exc_info)
        clean = scrub(trace)
        if clean != trace:
            record.exc_text = clean  # formatters print exc_text instead of formatting exc_info again
    return record
