"""Embeddings over HTTP through litellm: OpenAI, Cohere, Ollama, any OpenAI-compatible server."""

from __future__ import annotations

import os
import re
import time
from typing import Any, NoReturn

import numpy as np

from composer.embedding.base import PrefixedEmbedder
from composer.errors import ComposerError
from composer.llm.faults import register_secret, retry_after
from composer.redact import scrub_url
from composer.secrets import NO_KEY, read_key

_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET)", re.IGNORECASE)
_MAX_BACKOFF_S = 60.0


def redact_secrets(message: str) -> str:
    """Remove the values of key-like environment variables from a message before it reaches a log."""
    for name, value in os.environ.items():
        if len(value) >= 6 and _SECRET_ENV.search(name):
            message = message.replace(value, "***")
    return message


def retry_delay(exc: BaseException, attempt: int) -> float:
    """The server's Retry-After when it sends one, else exponential backoff: 1, 2, 4, ... seconds."""
    wanted = retry_after(exc)
    return min(_MAX_BACKOFF_S, 2.0**attempt if wanted is None else wanted)


class LiteLLMEmbedder(PrefixedEmbedder):
    """``litellm.embedding`` in batches; API keys come from litellm's usual environment variables, for
    the provider's own endpoint only: an ``api_base`` gets the key ``api_key_env`` names, or none.

    litellm's own retries cover chat completions only (its OpenAI client adds two quick ones), so rate
    limits (429), server errors and dropped connections are retried here with backoff, for every
    provider alike; a run that still fails keeps every finished batch in the embedding cache and
    resumes from there.
    """

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key_env: str | None = None,
        query_prefix: str = "",
        passage_prefix: str = "",
        batch_size: int = 64,
        timeout: float = 600.0,
        max_retries: int = 5,
    ) -> None:
        super().__init__(query_prefix=query_prefix, passage_prefix=passage_prefix)
        self._model = model
        self._api_base = api_base
        # Read now, before any request: a name the user did not allow is refused here (composer.secrets).
        self._api_key = read_key(api_key_env, field="embedding.api_key_env") if api_key_env else None
        register_secret(self._api_key)
        self._batch_size = batch_size
        self._timeout = timeout
        self._max_retries = max_retries
        self._dim: int | None = None

    @property
    def identity(self) -> str:
        # The server is part of the identity: "openai/x" served by two OpenAI-compatible hosts may be
        # two different models.
        # Without its credentials: the identity is stored (in the embedding cache), and a key or password
        # names no other server.
        return f"litellm:{self._model}" + (f"@{scrub_url(self._api_base)}" if self._api_base else "")

    @property
    def dim(self) -> int:
        """Known after the first response; asking before any encode costs one one-text request."""
        if self._dim is None:
            self._encode(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def _encode(self, texts: list[str]) -> np.ndarray:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price-map download at import
        import litellm

        litellm.suppress_debug_info = True  # its "Give Feedback" banner would follow our own error line
        size = self._batch_size
        parts = [self._request(litellm, texts[i : i + size]) for i in range(0, len(texts), size)]
        return np.concatenate(parts)

    def _request(self, litellm: Any, batch: list[str]) -> np.ndarray:
        # OpenAI rejects empty strings; a lone space embeds as "nothing" on every server we know.
        batch = [t if t.strip() else " " for t in batch]
        transient = (
            litellm.RateLimitError,
            litellm.InternalServerError,
            litellm.ServiceUnavailableError,
            litellm.APIConnectionError,
            litellm.Timeout,
        )
        for attempt in range(self._max_retries + 1):
            try:
                # With api_base, never litellm's fallback to the provider's usual key variable: that
                # would send OPENAI_API_KEY (say) to whatever address the config names.
                key = {"api_key": self._api_key or NO_KEY} if self._api_base or self._api_key else {}
                response = litellm.embedding(
                    model=self._model, input=batch, api_base=self._api_base, timeout=self._timeout, **key
                )
                break
            except transient as exc:
                if attempt == self._max_retries:
                    self._fail(exc, f" after {attempt + 1} attempts")
                time.sleep(retry_delay(exc, attempt))
            except Exception as exc:
                self._fail(exc, "")
        rows = sorted(response.data, key=lambda item: _field(item, "index"))
        vectors = np.asarray([_field(item, "embedding") for item in rows], dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(batch):
            raise ComposerError(
                f"litellm model '{self._model}' returned {len(rows)} embeddings for {len(batch)} texts"
            )
        if self._dim is None:
            self._dim = int(vectors.shape[1])
        elif vectors.shape[1] != self._dim:
            raise ComposerError(
                f"litellm model '{self._model}' changed dimension {self._dim} -> {vectors.shape[1]}"
            )
        return vectors

    def _fail(self, exc: BaseException, when: str) -> NoReturn:
        detail = redact_secrets(f"{type(exc).__name__}: {exc}")
        raise ComposerError(f"litellm embedding with model '{self._model}' failed{when}: {detail}") from None


def _field(item: Any, name: str) -> Any:
    """litellm returns plain dicts for some providers and objects for others."""
    return item[name] if isinstance(item, dict) else getattr(item, name)
