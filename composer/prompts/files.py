"""A prompt file: YAML holding ``{system, user}``, or variants per language (``ar``, ``fa``, ``en``,
``default``), each ``{system, user}``. Read and checked with each error naming the file, the line and the
key (as ``FIELD.ar.user``), so a typo in a team's prompt stops a study before it starts.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml

from composer.errors import ConfigError
from composer.prompts.spec import PROMPT_KEYS, PromptMessages, UserPrompt
from composer.prompts.template import ANSWER_FIELDS, ANSWER_REQUIRED, check_messages
from composer.yamlfile import read_yaml

_MESSAGE_KEYS = ("system", "user")


def read_prompt_file(
    path: str | Path, *, field: str, allowed: Collection[str] = ANSWER_FIELDS,
    required: Collection[str] = ANSWER_REQUIRED,
) -> UserPrompt:
    """The prompt the file at ``path`` holds, checked for its use (``allowed``/``required``
    placeholders), its ``source`` the path; a bad file is one ConfigError naming it, the line and
    ``field.<key>``."""
    p = Path(path)
    data = read_yaml(p, what="prompt file")
    lines = _key_lines(p)
    if not isinstance(data, dict) or not data:
        raise ConfigError("expected {system, user}, or variants per language (ar, fa, en, default) each "
                          "{system, user}", path=p, field=field)
    single = any(k in data for k in _MESSAGE_KEYS)
    variants: dict[str, Any] = {"default": data} if single else data
    allowed_keys = _MESSAGE_KEYS if single else PROMPT_KEYS
    for key in data:
        if key not in allowed_keys:
            raise ConfigError(f"unknown key; expected {', '.join(allowed_keys)}", path=p,
                              line=lines.get((str(key),)), field=f"{field}.{key}")
    checked: dict[str, PromptMessages] = {}
    for key, value in variants.items():
        at = () if single else (key,)
        where = field if single else f"{field}.{key}"
        checked[key] = _messages(value, p, where, lines, at)
        check_messages(checked[key], allowed=allowed, required=required, field=where, path=p,
                       lines={part: line for part in _MESSAGE_KEYS
                              if (line := lines.get((*at, part))) is not None})
    return UserPrompt.model_validate({**checked, "source": str(p)})


def _messages(value: Any, path: Path, field: str, lines: dict[tuple[str, ...], int],
              at: tuple[str, ...]) -> PromptMessages:
    """One variant's ``{system, user}``: text each, ``user`` required."""
    if not isinstance(value, dict):
        raise ConfigError("expected a mapping {system, user}", path=path, line=lines.get(at), field=field)
    for key in value:
        if key not in _MESSAGE_KEYS:
            raise ConfigError("unknown key; expected system, user", path=path,
                              line=lines.get((*at, str(key))), field=f"{field}.{key}")
    if "user" not in value:
        raise ConfigError("missing: the user message", path=path, line=lines.get(at), field=f"{field}.user")
    for key in _MESSAGE_KEYS:
        if key in value and not isinstance(value[key], str):
            raise ConfigError("expected text", path=path, line=lines.get((*at, key)), field=f"{field}.{key}")
    return PromptMessages(system=value.get("system", ""), user=value["user"])


def _key_lines(path: Path) -> dict[tuple[str, ...], int]:
    """The line of each key of the file's first two mapping levels (read_yaml checked the file first)."""
    node = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    lines: dict[tuple[str, ...], int] = {}
    if not isinstance(node, yaml.MappingNode):
        return lines
    for key, value in node.value:
        lines[(str(key.value),)] = key.start_mark.line + 1
        if isinstance(value, yaml.MappingNode):
            for sub, _ in value.value:
                lines[(str(key.value), str(sub.value))] = sub.start_mark.line + 1
    return lines
