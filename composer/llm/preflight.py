"""Is every LLM a run will call reachable? One tiny, uncached request per endpoint, before the first
trial of a study, the first answer of ``eval`` or the first question of ``synth``: a dead ``api_base``,
a wrong or missing key or an unknown model is one clear error at start (in seconds), never a failed
trial or sample after another. A busy server (429, 5xx) or an odd reply is reachable: the run retries
those and counts them against its failure budget."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from composer.errors import ComposerError
from composer.llm.config import LLMConfig
from composer.llm.sdk import load_litellm
from composer.llm.spend import purpose
from composer.redact import scrub_url

if TYPE_CHECKING:
    from composer.llm.client import Result

PING = [{"role": "user", "content": "Reply with the single word: ok"}]
UNREACHABLE = ("connection", "timeout", "other")
"""Failure kinds that stop a study before it starts ("other": refused key, unknown model, no key)."""
PING_RETRIES = 1
"""A dead server answers nothing twice; a flaky one gets one more chance, as trials would give it."""


def check_reachable(configs: Iterable[LLMConfig], *, before: str = "the study started") -> int:
    """Send one request to each distinct (model, endpoint, key variable); the number sent (counted for the
    purpose "preflight"). A failure is a ComposerError naming the model, the endpoint (credentials masked)
    and the provider's reason; a key missing from the environment is named before any request."""
    seen: set[tuple[str, str | None, str | None]] = set()
    with purpose("preflight"):
        for config in configs:
            endpoint = (config.model, config.api_base, config.api_key_env)
            if endpoint not in seen:
                seen.add(endpoint)
                _ping(config, before)
    return len(seen)


TIMED_PINGS = 2
"""Test requests an estimate times per model, keeping the fastest: the first also pays for setting up
the client and its connection, which a study pays once."""


def measure_latency(configs: Iterable[LLMConfig]) -> dict[str, float]:
    """Seconds a test request takes, per model, for the endpoints that answer it: what an estimate times
    a study's requests by. A model out of reach, or whose key is not set yet, only goes without."""
    out: dict[str, float] = {}
    with purpose("preflight"):
        for config in configs:
            if config.model in out or missing_key(config) is not None:
                continue
            latencies: list[float] = []
            try:
                while len(latencies) < TIMED_PINGS and (result := _send(config)).error_kind is None:
                    latencies.append(result.latency)
            except ComposerError:  # its key variable is unset: priced, not timed
                continue
            if latencies:
                out[config.model] = min(latencies)
    return out


def _send(config: LLMConfig) -> Result:
    """The test request to ``config``'s endpoint, uncached, with at most ``PING_RETRIES`` retries."""
    from composer.llm.client import LLMClient
    from composer.llm.sync import run_sync

    retries = min(config.max_retries, PING_RETRIES)
    probe = config.model_copy(update={"cache": False, "max_retries": retries})
    return run_sync(LLMClient(probe).acomplete(PING, max_tokens=8, temperature=0.0))


def _ping(config: LLMConfig, before: str) -> None:
    """One test request to ``config``'s endpoint; a ComposerError when it cannot be reached."""
    variable = missing_key(config)
    if variable is not None:
        raise ComposerError(
            f"missing API key for the LLM {config.model}: set {variable} (or name the variable that "
            "holds the key with api_key_env / --llm-key-env)"
        )
    result = _send(config)
    if result.error_kind in UNREACHABLE:
        where = f" at {scrub_url(config.api_base)}" if config.api_base else ""
        raise ComposerError(
            f"the LLM {config.model}{where} did not answer a test request before {before} "
            f"({result.error_kind}: {scrub_url(result.error or '')}); check llm.api_base, "
            "the key variable and the model name"
        )


def missing_key(config: LLMConfig) -> str | None:
    """The environment variable a hosted model's key should be in, when it is unset (litellm knows each
    provider's). A named ``api_key_env`` is checked by the client; a self-hosted ``api_base`` may need none.
    """
    if config.api_key_env is not None or config.api_base is not None:
        return None
    try:
        missing = load_litellm().validate_environment(model=config.model).get("missing_keys") or []
    except Exception:  # a provider litellm cannot tell: the test request will say what is wrong
        return None
    keys = [str(k) for k in missing if "KEY" in str(k).upper() or "TOKEN" in str(k).upper()]
    return keys[0] if keys else None
