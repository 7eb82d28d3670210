"""Keeping secrets out of what a study records: MLflow params, tags and artifacts, summaries, exports.

Parameters whose name says key/token/secret/password are masked, as are credentials inside URLs; API keys
are never in a config at all (``api_key_env`` names the variable holding one, and is kept when it looks
like a variable name).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_SECRET_WORDS = {"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials",
                 "authorization", "cookie"}
_URL_USERINFO = re.compile(r"(?<=://)(?:[^\s/?#@]*:[^\s?#]*|[^\s/?#@]+)@")
"""``user:password@`` up to the last ``@`` before the path's query (a password may hold ``/`` or an
unescaped ``@``), or ``token@`` before the first ``/``; ``https://host/@name`` is a path, left alone."""
_QUERY_PARAM = re.compile(r"(?<=[?&;])([^=&#\s]+)=([^&#\s]*)")
_SECRET_PARAM_WORDS = {"sig", "signature", "auth", "authorization", "code", "session", "sas", "pwd"}
_SECRET_PARAM_PARTS = ("token", "secret", "passw", "apikey", "api_key", "credential", "signature")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_ENV_VAR_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
MASK = "***"


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"chunking": {"size": 800}}`` -> ``{"chunking.size": 800}``."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def is_secret_name(name: str) -> bool:
    """A name with a word key/token/secret/password... (an index key names a collection: not secret)."""
    lowered = name.lower()
    if lowered.endswith("index_key"):
        return False
    return any(part in _SECRET_WORDS for part in re.split(r"[._\-\s]+", lowered))


def scrub(values: Mapping[str, Any]) -> dict[str, Any]:
    """Mask text under secret-looking names (at any depth) and user:password@ in URLs.

    Only strings are masked: a secret is text, while numbers such as ``token_f1`` are scores.
    """
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, str) and value and is_secret_name(str(key)) and not _names_variable(key, value):
            out[key] = MASK
        elif isinstance(value, Mapping):
            out[key] = scrub(value)
        elif isinstance(value, str):
            out[key] = scrub_url(value)
        else:
            out[key] = value
    return out


def scrub_url(text: str) -> str:
    """``text`` with the ``user:password@`` of every URL in it masked, and the values of query parameters
    named like a secret (``?api-key=``, ``&token=``, ``sig=``): storage, tracking and LLM endpoints may
    carry a password or a key, and what Composer records or prints often ends up in a log."""
    return _QUERY_PARAM.sub(_mask_param, _URL_USERINFO.sub(MASK + "@", text))


def _mask_param(match: re.Match[str]) -> str:
    name, value = match.group(1), match.group(2)
    lowered = name.lower()
    words = set(re.split(r"[._\-\s]+", _CAMEL.sub("_", name).lower()))  # accessToken: access, token
    secret = (bool(words & (_SECRET_WORDS | _SECRET_PARAM_WORDS))
              or any(part in lowered for part in _SECRET_PARAM_PARTS))
    return f"{name}={MASK}" if secret and value else match.group(0)


def _names_variable(key: Any, value: str) -> bool:
    """``api_key_env: OPENAI_API_KEY`` names where the key is; an exported config needs it to work."""
    return str(key).lower().endswith("_env") and bool(_ENV_VAR_NAME.match(value))
