"""Prompt templates in Arabic, Persian and English, picked by the language of the question."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from string import Template
from typing import Literal

from composer.text import detect_language

PromptLanguage = Literal["ar", "fa", "en"]
PROMPT_LANGUAGES: tuple[PromptLanguage, ...] = ("ar", "fa", "en")


def prompt_language(text: str) -> PromptLanguage:
    """The language to prompt in for this text; anything not Arabic or Persian gets English."""
    lang = detect_language(text)
    return lang if lang in ("ar", "fa") else "en"


@dataclass(frozen=True)
class PromptTemplate:
    """A system and a user message with $-placeholders ($ keeps the JSON examples' braces literal)."""

    system: str
    user: str

    def messages(self, **fields: str) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": Template(self.system).substitute(fields)},
            {"role": "user", "content": Template(self.user).substitute(fields)},
        ]


Localized = Mapping[PromptLanguage, PromptTemplate]


def numbered(items: Sequence[str], *, brackets: bool = True) -> str:
    """Items as "[1] ..." lines (or "1. ..."), the numbering the replies refer back to."""
    return "\n".join(f"[{i}] {t}" if brackets else f"{i}. {t}" for i, t in enumerate(items, 1))
