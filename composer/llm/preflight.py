"""Is every LLM a run will call reachable? One tiny, uncached request per endpoint, before the first
trial of a study, the first answer of ``eval`` or the first question of ``synth``: a dead ``api_base``,
a wrong or missing key or an unknown model is one clear error at start (in seconds), never a failed
trial or sample after another. A busy server (429, 5xx) or an odd reply is reachable: the run retries
those and counts them against its failure budget."""

from __future__ import annotations

from collections.abc import Iterable

from composer.errors import ComposerError
from composer.llm.config import LLMConfig
from composer.llm.sdk import load_litellm
from composer.llm.spend import purpose
from composer.redact import scrub_url

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


def _ping(config: LLMConfig, before: str) -> None:
    """One test request to ``config``'s endpoint; a ComposerError when it cannot be reached."""
    from composer.llm.client import LLMClient
    from composer.llm.sync import run_sync

    variable = missing_key(config)
    if variable is not None:
        raise ComposerError(
            f"missing API key for the LLM {config.model}: set {variable} (or name the variable that "
            "holds the key with api_key_env / --llm-key-env)"
        )
    retries = min(config.max_retries, PING_RETRIES)
    probe = config.model_copy(update={"cache": False, "max_retries": retries})
    result = run_sync(LLMClient(probe).acomplete(PING, max_tokens=8, temperature=0.0))
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
