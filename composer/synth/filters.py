"""The deterministic quality filters, cheap enough to run before any check costs an LLM call."""

from __future__ import annotations

import re
from collections.abc import Sequence

from composer.metrics.answer import token_f1
from composer.metrics.textmatch import contains_answer
from composer.text import tokenize

REASONS: tuple[str, ...] = (
    "llm_failed",
    "language",
    "length",
    "span_not_found",
    "answer_in_question",
    "self_contained",
    "near_duplicate",
    "unsupported",
    "answered_by_passage",
    "answerable_without_passage",
    "check_failed",
)
"""Why a generated question was dropped, in the order the filters run."""

_ARABIC_SCRIPT = re.compile(r"[\u0600-\u06ff\u0750-\u077f\ufb50-\ufdff\ufe70-\ufeff]")
_LATIN = re.compile(r"[A-Za-z]")
_TO_PERSIAN = str.maketrans({"ي": "ی", "ى": "ی", "ك": "ک"})


def persian_letters(text: str) -> str:
    """Arabic yeh and kaf as Persian ی and ک: models writing Persian often mix in the Arabic forms."""
    return text.translate(_TO_PERSIAN)


def wrong_script(text: str, lang: str) -> bool:
    """Whether the text is not written in the passage's script (Arabic script for ar and fa, else Latin).

    Script, not language: a short Persian question often has no Persian-only letter, so ar vs fa cannot
    be told apart reliably; a reply in English to an Arabic prompt can.
    """
    arabic, latin = len(_ARABIC_SCRIPT.findall(text)), len(_LATIN.findall(text))
    if lang in ("ar", "fa"):
        return arabic <= latin
    return arabic > latin


def length_problem(
    question: str, answer: str | None, *, min_chars: int, max_chars: int, max_answer_words: int | None
) -> str | None:
    """Why the question or the answer is out of bounds, or None."""
    if not min_chars <= len(question) <= max_chars:
        return f"question of {len(question)} chars (bounds {min_chars}-{max_chars})"
    if answer is not None and max_answer_words is not None:
        words = len(answer.split())
        if words > max_answer_words:
            return f"answer of {words} words (at most {max_answer_words})"
    return None


def answer_in_question(question: str, answer: str) -> bool:
    """The question gives its own answer away (folded text, so spelling variants count)."""
    return contains_answer(question, answer)


def leans_on(follow_up: str, standalone: str, earlier: Sequence[str], lang: str) -> bool:
    """Whether a follow-up needs its conversation: its standalone rewrite brings back words of the earlier
    user turns (the entity a pronoun or an ellipsis stands for) that the follow-up itself leaves out. One
    that repeats them all, or whose rewrite takes nothing from the earlier turns, stands alone."""
    said = _key_tokens(follow_up, lang)
    before = frozenset().union(*(_key_tokens(t, lang) for t in earlier))
    return bool((_key_tokens(standalone, lang) & before) - said)


def _key_tokens(text: str, lang: str) -> frozenset[str]:
    """Stemmed content words: an Arabic clitic or an English possessive does not make a word new."""
    return frozenset(tokenize(text, lang, stopwords=True, stem=True))


def closed_book_match(closed: str, reference: str, threshold: float, lang: str) -> bool:
    """The model's answer without the passage matches the reference: the question does not need it."""
    return contains_answer(closed, reference) or token_f1(closed, reference, lang) >= threshold


class DuplicateIndex:
    """Questions seen so far as sets of normalized tokens; a new one at Jaccard >= threshold is a repeat."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self._seen: list[frozenset[str]] = []

    def duplicate(self, question: str, lang: str) -> bool:
        tokens = frozenset(tokenize(question, lang))
        return any(
            len(tokens & seen) / len(tokens | seen) >= self.threshold for seen in self._seen if tokens | seen
        )

    def add(self, question: str, lang: str) -> None:
        self._seen.append(frozenset(tokenize(question, lang)))
