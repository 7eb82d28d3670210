"""A team's prompt in MLflow's Prompt Registry, through MLflow's own API (``MlflowClient``'s
``register_prompt``, ``load_prompt``, ``set_prompt_alias``), so the team's registry stays the one source.

How a prompt is stored in one registry version: its ``default`` variant (else the first it has) as an
MLflow *chat* prompt (a system and a user message, MLflow's ``{{var}}`` form), so anyone can
``mlflow.genai.load_prompt(uri).format(question=..., contexts=...)`` without Composer. A prompt with
several language variants also carries them all, in Composer's ``{var}`` form, as one JSON tag
(``composer.variants``): a registry version is then the whole prompt, read back exactly as it was
registered, while the template MLflow shows and formats stays a plain chat prompt. (One JSON text as the
template would keep the variants together too, but no one but Composer could format it.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from composer.errors import ConfigError
from composer.llm.faults import scrub
from composer.prompts.spec import PromptMessages, UserPrompt
from composer.prompts.template import literal_braces
from composer.redact import scrub_url
from composer.store import sqlite_file

VARIANTS_TAG = "composer.variants"
"""The registry tag holding every variant of a prompt that has more than one."""
SHA_TAG = "composer.prompt_sha256"
"""The registry tag holding a version's ``UserPrompt.sha256``: how a text already registered is found
(``registered_version``), so a rerun or a second optimization never registers it twice."""

_URI = re.compile(r"prompts:/(?P<name>[^/@]+)(?:@(?P<alias>[^/@]+)|/(?P<version>[0-9]+))")
_MLFLOW_VAR = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_COMPOSER_TOKEN = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")


def answer_prompt_name(owner: str) -> str:
    """The registry name of ``owner``'s answer prompt (a registered model's, or the study's that
    ``composer tune-prompt`` optimized): one rule for both, and never ``owner`` itself, since prompts and
    models share one namespace in MLflow's registry."""
    return f"{owner}.answer"


def to_mlflow(text: str) -> str:
    """Composer's ``{var}`` text (checked) as MLflow's ``{{var}}``; ``{{``/``}}`` become single braces."""
    return _COMPOSER_TOKEN.sub(lambda m: m.group(0)[0] if m.group(1) is None else f"{{{{{m.group(1)}}}}}",
                               text)


def from_mlflow(text: str) -> str:
    """MLflow's ``{{var}}`` text as Composer's ``{var}`` text, any other brace made literal."""
    out: list[str] = []
    end = 0
    for match in _MLFLOW_VAR.finditer(text):
        out.append(literal_braces(text[end:match.start()]))
        out.append(f"{{{match.group(1)}}}")
        end = match.end()
    out.append(literal_braces(text[end:]))
    return "".join(out)


def _client(tracking_uri: str | None, field: str, *, creating: bool) -> Any:
    """MLflow's client on ``tracking_uri`` (None: MLflow's current one). Reading from a local SQLite store
    that does not exist is an error, not a new empty store left behind."""
    import mlflow

    uri = tracking_uri or mlflow.get_tracking_uri()
    file = sqlite_file(uri)
    if not creating and file is not None and not Path(file).exists():
        raise ConfigError(f"no MLflow store at {file}: the prompt registry it names does not exist",
                          field=field)
    if creating:
        from composer.mlflow_store import prepare_mlflow_store

        prepare_mlflow_store(uri)  # whole or absent, and a copy of the migrated store instead of ~3 s
    return mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)


def load_registered(uri: str, tracking_uri: str | None = None, *, field: str = "generation.prompt"
                    ) -> UserPrompt:
    """The prompt ``uri`` (``prompts:/NAME@ALIAS`` or ``prompts:/NAME/VERSION``) names, its ``source``
    pinned to ``prompts:/NAME/VERSION``: what a trial records and an export writes, so the alias may move
    later without changing what was measured. A URI that does not resolve is one ConfigError naming
    ``field``."""
    if not _URI.fullmatch(uri):
        raise ConfigError(f"{uri!r} is not a registry URI: expected prompts:/NAME@ALIAS or "
                          "prompts:/NAME/VERSION", field=field)
    client = _client(tracking_uri, field, creating=False)
    try:
        found = client.load_prompt(uri)
    except Exception as exc:  # MLflow raises its own and its stores' errors: each means "not resolved"
        why = scrub_url(scrub(str(exc).splitlines()[0])) if str(exc) else type(exc).__name__  # a URL, a key
        raise ConfigError(f"the registry prompt {uri} does not resolve: {why}", field=field) from None
    if found is None:
        raise ConfigError(f"the registry prompt {uri} does not resolve", field=field)
    pinned = f"prompts:/{found.name}/{found.version}"
    variants = found.tags.get(VARIANTS_TAG)
    try:
        if variants is not None:
            return UserPrompt.model_validate({**json.loads(variants), "source": pinned,
                                              "version": int(found.version)})
        return UserPrompt(default=_messages(found.template), source=pinned, version=int(found.version))
    except ValueError as exc:
        raise ConfigError(f"the registry prompt {pinned} is not a prompt Composer can send: "
                          f"{str(exc).splitlines()[0]}", field=field) from None


def _messages(template: str | list[dict[str, Any]]) -> PromptMessages:
    """An MLflow template as one variant: a chat prompt's system and user messages, a text prompt as the
    user message."""
    if isinstance(template, str):
        return PromptMessages(user=from_mlflow(template))
    by_role = {m.get("role"): str(m.get("content", "")) for m in template}
    if "user" not in by_role or set(by_role) - {"system", "user"}:
        raise ValueError("expected a chat prompt of one system and one user message")
    return PromptMessages(system=from_mlflow(by_role.get("system", "")), user=from_mlflow(by_role["user"]))


def register_prompt(name: str, prompt: UserPrompt, *, tags: dict[str, str] | None = None,
                    commit_message: str | None = None, tracking_uri: str | None = None) -> str:
    """Register ``prompt`` as a new version of ``name`` (stored as this module says); returns its pinned
    URI, ``prompts:/NAME/VERSION``."""
    shown = prompt.for_language("default")
    template: list[dict[str, str]] = [{"role": "user", "content": to_mlflow(shown.user)}]
    if shown.system:
        template.insert(0, {"role": "system", "content": to_mlflow(shown.system)})
    all_tags = {**(tags or {}), SHA_TAG: prompt.sha256}
    if len(prompt.variants()) > 1 or "default" not in prompt.variants():
        all_tags[VARIANTS_TAG] = json.dumps({k: v.model_dump() for k, v in prompt.variants().items()},
                                            ensure_ascii=False)
    client = _client(tracking_uri, "prompt", creating=True)
    version = client.register_prompt(name, template, commit_message=commit_message, tags=all_tags)
    return f"prompts:/{version.name}/{version.version}"


def registered_version(name: str, prompt: UserPrompt, tracking_uri: str | None = None) -> str | None:
    """The pinned URI of the first version of ``name`` holding ``prompt``'s text (its ``SHA_TAG``), None
    when no version does (or no prompt has that name yet)."""
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST, ErrorCode

    client = _client(tracking_uri, "prompt", creating=True)
    found: list[int] = []
    token: str | None = None
    while True:
        try:
            page = client.search_prompt_versions(name, page_token=token)
        except MlflowException as exc:
            if exc.error_code == ErrorCode.Name(RESOURCE_DOES_NOT_EXIST):
                return None
            raise
        found += [int(v.version) for v in page if v.tags.get(SHA_TAG) == prompt.sha256]
        token = page.token
        if not token:
            return f"prompts:/{name}/{min(found)}" if found else None


def set_alias(name: str, alias: str, version: int, tracking_uri: str | None = None) -> None:
    """Point ``prompts:/NAME@ALIAS`` at ``version`` (a winner promoted)."""
    _client(tracking_uri, "prompt", creating=True).set_prompt_alias(name, alias, version)
