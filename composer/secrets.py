"""Which environment variables a config or a model may read a key from.

A pipeline YAML, a judge block or a registered model names the variable holding its key
(``api_key_env``), and Composer sends that value to the endpoint the same file names: a file that may
name any variable could send ``AWS_SECRET_ACCESS_KEY`` to any address. So a name is read only when the
user allowed it: a name starting with ``COMPOSER_``, one listed in ``$COMPOSER_ALLOW_ENV``
(comma-separated), one given with ``--allow-env NAME`` or in the experiment's ``allow_env:`` list (the
experiment is the user's own file), or one allowed in Python with ``composer.allow_env``. A pipeline or a
model cannot allow anything itself. A refused name's value is never read.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from composer.errors import ConfigError

PREFIX = "COMPOSER_"
ALLOW_ENV = "COMPOSER_ALLOW_ENV"
NO_KEY = "no-key"
"""The key sent to a configured ``api_base`` when no ``api_key_env`` names one: an explicit placeholder,
so that litellm never falls back to the provider's usual variable (``OPENAI_API_KEY``...) and sends it to
that address; keyless servers (vLLM, llama.cpp, Ollama) ignore it."""
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""What an environment variable's name looks like (a key pasted in its place does not)."""
_ALLOWED: set[str] = set()
"""Names allowed in this process (``allow_env``); forked workers inherit them."""


def allow_env(*names: str) -> None:
    """Let configs and models read their keys from the variables ``names`` (for the rest of the process),
    as ``--allow-env NAME`` does on the command line.

    Args:
        *names: Environment variable names, such as ``OPENAI_API_KEY``.

    Raises:
        ConfigError: A name is not a variable name.

    Example:
        ::

            composer.allow_env("OPENAI_API_KEY")
            pipe = composer.load_pipeline("best.yaml", "corpus.jsonl")
    """
    for name in names:
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise ConfigError(f"{name!r} is not an environment variable name", field="allow_env")
    _ALLOWED.update(names)


def env_allowed(name: str) -> bool:
    """Whether a config may read a key from the variable ``name`` (see the module)."""
    if name.startswith(PREFIX) or name in _ALLOWED:
        return True
    listed = os.environ.get(ALLOW_ENV, "")
    return name in {part.strip() for part in listed.split(",")}


def check_env(name: str, *, field: str, path: str | Path | None = None) -> None:
    """Refuse, before anything is read or sent, a variable the user did not allow (``field`` in ``path``
    named it)."""
    if not env_allowed(name):
        raise ConfigError(
            f"environment variable {name} may not be read by a config or a model: allow it with "
            f"--allow-env {name}, {ALLOW_ENV}={name} or the experiment's allow_env: list (in Python "
            f"composer.allow_env({name!r})), or keep the key in a {PREFIX} variable",
            path=path, field=field,
        )


def read_key(name: str, *, field: str, path: str | Path | None = None) -> str:
    """The key in the variable ``name``, once ``check_env`` allows it; a ConfigError when it is unset."""
    check_env(name, field=field, path=path)
    value = os.environ.get(name)
    if not value:
        raise ConfigError(f"environment variable {name} is not set", path=path, field=field)
    return value


def allowed_list(names: list[str]) -> list[str]:
    """An experiment's ``allow_env:`` list, checked and allowed as the experiment is read (a validator:
    ValueError for a bad name, which the experiment's loader reports with its file and field)."""
    bad = [name for name in names if not ENV_NAME.match(name)]
    if bad:
        raise ValueError(f"{bad[0]!r} is not an environment variable name")
    allow_env(*names)
    return names
