"""The resolved form of a team's prompt (``UserPrompt``) and the forms a config may give it in."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from composer.settings import Strict

PromptKey = Literal["ar", "fa", "en", "default"]
PROMPT_KEYS: tuple[PromptKey, ...] = ("ar", "fa", "en", "default")
"""A prompt's variants: one per prompt language, and ``default`` for a language without its own."""


def is_registry_uri(ref: str) -> bool:
    """Whether ``ref`` names a registry prompt (``prompts:/...``) rather than a file."""
    return ref.startswith("prompts:/")


class PromptMessages(Strict):
    """One variant: a system and a user message with ``{placeholder}`` fields (``{{``/``}}`` are literal
    braces)."""

    system: str = ""
    user: str


class UserPrompt(Strict):
    """A team's prompt, resolved: its variants' text and where the text came from.

    ``source`` is a registry URI pinned to its version (``prompts:/answers/3``), a file's path, or None for
    a prompt written inline; ``version`` is the registry version. Given as ``{system, user}`` it is the
    ``default`` variant. What a trial records (with ``sha256``) and what an export writes.

    Attributes:
        ar: The Arabic variant (``fa``, ``en`` likewise; ``default`` for any other language).
        source: Where the text came from: a pinned registry URI, a file, or None (inline).
        version: The registry version, for a prompt from the registry.

    Example:
        ::

            prompt = composer.UserPrompt(system="Cite passages as [1].",
                                         user="{contexts}\n\nQuestion: {question}")
            composer.optimize_prompt("arabic-demo", experiment="experiments/arabic-llm.yaml",
                                     seed_prompt=prompt)
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    ar: PromptMessages | None = Field(default=None, exclude_if=lambda v: v is None)
    fa: PromptMessages | None = Field(default=None, exclude_if=lambda v: v is None)
    en: PromptMessages | None = Field(default=None, exclude_if=lambda v: v is None)
    default: PromptMessages | None = Field(default=None, exclude_if=lambda v: v is None)
    source: str | None = Field(default=None, exclude_if=lambda v: v is None)
    version: int | None = Field(default=None, exclude_if=lambda v: v is None)

    @model_validator(mode="before")
    @classmethod
    def _single(cls, data: Any) -> Any:
        """``{system, user}`` alone is the default variant."""
        if isinstance(data, dict) and "user" in data and not any(k in data for k in PROMPT_KEYS):
            rest = {k: v for k, v in data.items() if k not in ("system", "user")}
            return {**rest, "default": {"system": data.get("system", ""), "user": data["user"]}}
        return data

    @model_validator(mode="after")
    def _some_variant(self) -> UserPrompt:
        if not self.variants():
            raise ValueError("a prompt needs {system, user}, or variants per language (ar, fa, en, default)")
        return self

    def variants(self) -> dict[PromptKey, PromptMessages]:
        """The variants given, by key."""
        return {k: v for k in PROMPT_KEYS if (v := getattr(self, k)) is not None}

    def for_language(self, lang: str) -> PromptMessages:
        """The variant for prompt language ``lang``: its own, else ``default``, else the first given."""
        found = self.variants()
        own = found.get(lang)  # type: ignore[call-overload]
        return own or found.get("default") or next(iter(found.values()))

    @property
    def sha256(self) -> str:
        """Hash of the variants' text (not of where they came from): two sources of one text are one
        prompt to a trial's identity."""
        text = json.dumps({k: v.model_dump() for k, v in self.variants().items()}, ensure_ascii=False,
                          sort_keys=True)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


PromptRef = UserPrompt | str
"""A prompt as a config gives it: resolved (``UserPrompt``), or a reference still to resolve: a file path
or a registry URI (``prompts:/NAME@ALIAS``, ``prompts:/NAME/VERSION``)."""
