"""Word tokens over normalized text, with per-language stopwords and optional Snowball Arabic stemming."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from composer.text.lang import detect_language
from composer.text.normalize import normalize
from composer.text.stopwords import STOPWORDS

# Letters, digits and marks of any script; punctuation (Latin, Arabic ، ؛ ؟) separates tokens.
TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


@lru_cache(maxsize=4)
def snowball(lang: str) -> Any:
    """Snowball's C stemmer for "ar" or "en" (PyStemmer), one per process."""
    import Stemmer

    return Stemmer.Stemmer({"ar": "arabic", "en": "english"}[lang])


ANALYSIS_MEMO = 1 << 16
"""Texts whose tokens are kept per setting: a study tokenizes the same chunks and questions in every
trial (BM25 queries, answers, answer metrics), so each is analyzed once."""


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
    return list(_analyze(text, lang, stopwords, stem))


@lru_cache(maxsize=ANALYSIS_MEMO)
def _analyze(text: str, lang: str | None, stopwords: bool, stem: bool) -> tuple[str, ...]:
    if lang is None:
        lang = detect_language(text)
    tokens = TOKEN.findall(normalize(text, lang))
    if stopwords:
        stop = STOPWORDS.get(lang, frozenset())
        tokens = [t for t in tokens if t not in stop]
    if stem and lang in ("ar", "en"):
        tokens = snowball(lang).stemWords(tokens)
    return tuple(tokens)


def content_tokens(text: str, lang: str | None = None) -> list[str]:
    """Tokens that carry meaning: the ones answer metrics compare."""
    return tokenize(text, lang, stopwords=True)
