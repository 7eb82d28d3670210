"""Is every LLM a study will call reachable? One tiny, uncached request per endpoint, before the first
trial: a dead ``api_base``, a wrong key or an unknown model is one clear error at start, never a
failed trial after another. A busy server (429, 5xx) or an odd reply is reachable: trials retry those
and count them against their failure budget."""

from __future__ import annotations

from collections.abc import Iterable

from composer.errors import ComposerError
from composer.llm.config import LLMConfig
from composer.redact import scrub_url

PING = [{"role": "user", "content": "Reply with the single word: ok"}]
UNREACHABLE = ("connection", "timeout", "other")
"""Failure kinds that stop a study before it starts ("other": refused key, unknown model, no key)."""
PING_RETRIES = 1
"""A dead server answers nothing twice; a flaky one gets one more chance, as trials would give it."""


def check_reachable(configs: Iterable[LLMConfig]) -> int:
    """Send one request to each distinct (model, endpoint, key variable); the number sent. A failure is a
    ComposerError naming the model, the endpoint (credentials masked) and the provider's reason."""
    from composer.llm.client import LLMClient
    from composer.llm.sync import run_sync

    seen: set[tuple[str, str | None, str | None]] = set()
    for config in configs:
        endpoint = (config.model, config.api_base, config.api_key_env)
        if endpoint in seen:
            continue
        seen.add(endpoint)
        retries = min(config.max_retries, PING_RETRIES)
        probe = config.model_copy(update={"cache": False, "max_retries": retries})
        result = run_sync(LLMClient(probe).acomplete(PING, max_tokens=8, temperature=0.0))
        if result.error_kind in UNREACHABLE:
            where = f" at {scrub_url(config.api_base)}" if config.api_base else ""
            raise ComposerError(
                f"the LLM {config.model}{where} did not answer a test request before the study "
                f"started ({result.error_kind}: {scrub_url(result.error or '')}); check llm.api_base, "
                "the key variable and the model name"
            )
    return len(seen)
