"""Answer metrics without an LLM: deterministic and free, for regression tracking and offline studies."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

from composer.metrics.refusal import is_refusal
from composer.text import content_tokens, detect_language, tokenize

__all__ = ["exact_match", "is_refusal", "overlap_faithfulness", "shared_language", "token_f1", "unsupported"]


def shared_language(*texts: str) -> str:
    """One language for texts compared with each other, so both sides fold and drop stopwords alike."""
    return detect_language(" ".join(texts))


def _golds(golds: str | Sequence[str]) -> list[str]:
    refs = [golds] if isinstance(golds, str) else list(golds)
    if not refs:
        raise ValueError("at least one gold answer is needed")
    return refs


def _answer_tokens(text: str, lang: str) -> list[str]:
    """Content tokens, or every token when the text is only function words (e.g. the answer "هو")."""
    return content_tokens(text, lang) or tokenize(text, lang)


def _f1(predicted: list[str], gold: list[str]) -> float:
    if not predicted or not gold:
        return float(predicted == gold)
    common = sum((Counter(predicted) & Counter(gold)).values())
    if not common:
        return 0.0
    p, r = common / len(predicted), common / len(gold)
    return 2 * p * r / (p + r)


def token_f1(answer: str, golds: str | Sequence[str], lang: str | None = None) -> float:
    """SQuAD-style token F1 over normalized content tokens, best over the gold answers."""
    refs = _golds(golds)
    lang = lang or shared_language(answer, *refs)
    predicted = _answer_tokens(answer, lang)
    return max(_f1(predicted, _answer_tokens(g, lang)) for g in refs)


def exact_match(answer: str, golds: str | Sequence[str], lang: str | None = None) -> float:
    """1.0 when the answer's normalized tokens equal a gold answer's (punctuation and spelling folded)."""
    refs = _golds(golds)
    lang = lang or shared_language(answer, *refs)
    predicted = tokenize(answer, lang)
    return 1.0 if any(predicted == tokenize(g, lang) for g in refs) else 0.0


def unsupported(answer: str, contexts: Sequence[str], lang: str | None = None) -> tuple[list[str], list[str]]:
    """The answer's distinct content tokens and those of them absent from every context.

    Stemmed on both sides: the question is whether a word is backed by the context, and Arabic inflects
    and attaches clitics (``الصحفيون`` is backed by ``صحفي``, ``للكتاب`` by ``الكتاب``).
    """
    lang = lang or shared_language(answer, *contexts)
    claimed = list(dict.fromkeys(tokenize(answer, lang, stopwords=True, stem=True)))
    backed: set[str] = set()
    for context in contexts:
        backed |= _stems(context, lang)
    return claimed, [t for t in claimed if t not in backed]


@lru_cache(maxsize=8192)
def _stems(text: str, lang: str) -> frozenset[str]:
    """Cached: the same retrieved chunks back the answers of many questions and of every trial."""
    return frozenset(tokenize(text, lang, stem=True))


def overlap_faithfulness(answer: str, contexts: Sequence[str], lang: str | None = None) -> float | None:
    """Share of the answer's content tokens found in the contexts; None when it has no content tokens."""
    claimed, missing = unsupported(answer, contexts, lang)
    return (len(claimed) - len(missing)) / len(claimed) if claimed else None
