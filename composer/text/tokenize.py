"""Word tokens over normalized text, with per-language stopwords and optional Snowball Arabic stemming."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from composer.text.lang import detect_language
from composer.text.normalize import normalize
from composer.text.stopwords import STOPWORDS

# Letters, digits and marks of any script; punctuation (Latin, Arabic ، ؛ ؟) separates tokens.
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


@lru_cache(maxsize=4)
def _stemmer(lang: str) -> Any:
    import Stemmer  # PyStemmer: Snowball's C stemmers

    return Stemmer.Stemmer({"ar": "arabic", "en": "english"}[lang])


def tokenize(
    text: str,
    lang: str | None = None,
    *,
    stopwords: bool = False,
    stem: bool = False,
) -> list[str]:
    """Normalized word tokens.

    ``stopwords=True`` drops the language's function words; ``stem=True`` applies Snowball (Arabic or
    English; Snowball has no Persian stemmer, so Persian tokens are left whole).
    """
    if lang is None:
        lang = detect_language(text)
    tokens = _TOKEN.findall(normalize(text, lang))
    if stopwords:
        stop = STOPWORDS.get(lang, frozenset())
        tokens = [t for t in tokens if t not in stop]
    if stem and lang in ("ar", "en"):
        tokens = _stemmer(lang).stemWords(tokens)
    return tokens


def content_tokens(text: str, lang: str | None = None) -> list[str]:
    """Tokens that carry meaning: the ones answer metrics compare."""
    return tokenize(text, lang, stopwords=True)
