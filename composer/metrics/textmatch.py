"""Text comparisons behind answer- and context-level matching, with one folding for every language."""

from __future__ import annotations

from functools import lru_cache

from composer.text import normalize, tokenize

JACCARD_THRESHOLD = 0.55
"""Token Jaccard at which a passage counts as a gold context (Muffakir's Composer uses the same)."""


@lru_cache(maxsize=65536)
def fold(text: str) -> str:
    """Normalized text for matching, whatever its language.

    Every text is folded the Persian way (ي ى → ی, ك → ک, ZWNJ dropped; Arabic folds the same letters the
    other way round), so an answer and a passage compare equal even when detecting their languages one by
    one would disagree: a short Persian answer often has no Persian-only letter, and read as Arabic its
    ZWNJ would become a space. Cached: a study judges the same passages for every trial.
    """
    return normalize(text, "fa")


@lru_cache(maxsize=65536)
def fold_tokens(text: str) -> frozenset[str]:
    """The distinct word tokens of ``fold(text)``."""
    return frozenset(tokenize(text, "fa"))


def contains_answer(text: str, answer: str) -> bool:
    """Whether the folded ``text`` contains the folded ``answer``.

    Character-level, because Arabic clitics attach to words (gold ``كتاب`` inside ``والكتاب``) and
    extractive gold spans often cut words; a match must not sit inside a longer number, so ``14`` does not
    match ``1400``.
    """
    needle = fold(answer)
    if not needle:
        return False
    haystack = fold(text)
    start = haystack.find(needle)
    while start >= 0:
        end = start + len(needle)
        digit_before = needle[0].isdigit() and start > 0 and haystack[start - 1].isdigit()
        digit_after = needle[-1].isdigit() and end < len(haystack) and haystack[end].isdigit()
        if not (digit_before or digit_after):
            return True
        start = haystack.find(needle, start + 1)
    return False


def matches_context(text: str, gold: str) -> bool:
    """Whether a passage is the gold context: one contains the other, or token Jaccard >= 0.55 (folded)."""
    passage, target = fold(text), fold(gold)
    if not passage or not target:
        return False
    if target in passage or passage in target:
        return True
    a, b = fold_tokens(text), fold_tokens(gold)
    union = len(a | b)
    return union > 0 and len(a & b) / union >= JACCARD_THRESHOLD
