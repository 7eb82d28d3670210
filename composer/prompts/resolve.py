"""One way from any form a config gives a prompt in to the checked text that is sent (``resolve_prompt``)."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from composer.prompts.files import read_prompt_file
from composer.prompts.registry import load_registered
from composer.prompts.spec import PromptRef, UserPrompt, is_registry_uri
from composer.prompts.template import ANSWER_FIELDS, ANSWER_REQUIRED, check_prompt


def resolve_prompt(
    ref: PromptRef, *, base: Path | None, tracking_uri: str | None, field: str,
    allowed: Collection[str] = ANSWER_FIELDS, required: Collection[str] = ANSWER_REQUIRED,
) -> UserPrompt:
    """``ref`` as a checked ``UserPrompt``: inline as it is, a file path read (relative to ``base``, the
    folder of the file that names it), a registry URI loaded with ``tracking_uri`` (None: MLflow's
    current one) and pinned to its version. Each failure is one ConfigError naming ``field``. Done once,
    before anything is sent: a trial, an export and a served model only ever see the resolved text."""
    if isinstance(ref, UserPrompt):
        return check_prompt(ref, allowed=allowed, required=required, field=field)
    if is_registry_uri(ref):
        return check_prompt(load_registered(ref, tracking_uri, field=field), allowed=allowed,
                            required=required, field=field)
    path = Path(ref).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    return read_prompt_file(path, field=field, allowed=allowed, required=required)
