"""Passages to ask about: sentence windows within length bounds, drawn so the whole corpus is covered.

Sampling is stratified by document: documents are shuffled with the seed and visited round-robin, one
window each per pass, so every document is asked about before any document is asked about twice.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from composer.data.types import Corpus, Document
from composer.llm.prompt import PromptLanguage, prompt_language
from composer.text import sentence_spans

T = TypeVar("T")


@dataclass(frozen=True)
class Passage:
    """A window of one document: ``text == document.text[start:end]``."""

    doc_id: str
    start: int
    end: int
    text: str
    title: str
    lang: PromptLanguage

    @property
    def key(self) -> str:
        return f"{self.doc_id}:{self.start}-{self.end}"


def windows(doc: Document, min_chars: int, max_chars: int) -> list[tuple[int, int]]:
    """Consecutive sentences grouped greedily up to ``max_chars``; a sentence longer than that is cut at
    the last space before the bound; a short tail joins the window before it when it fits, and windows
    still under ``min_chars`` are dropped (too little to ask about)."""
    spans: list[tuple[int, int]] = []
    for s, e in sentence_spans(doc.text):
        while e - s > max_chars:  # one overlong sentence: cut it at a word boundary
            cut = doc.text.rfind(" ", s + 1, s + max_chars)
            cut = cut if cut > s else s + max_chars
            spans.append((s, cut))
            s = cut + 1 if doc.text[cut : cut + 1] == " " else cut
        spans.append((s, e))
    out: list[tuple[int, int]] = []
    start = end = -1
    for s, e in spans:
        if start < 0:
            start, end = s, e
        elif e - start <= max_chars:
            end = e
        else:
            out.append((start, end))
            start, end = s, e
    if start >= 0:
        if out and end - start < min_chars and end - out[-1][0] <= max_chars:
            start = out.pop()[0]
        out.append((start, end))
    return [(s, e) for s, e in out if e - s >= min_chars]


def corpus_passages(
    corpus: Corpus, min_chars: int, max_chars: int, lang: str = "auto"
) -> dict[str, list[Passage]]:
    """Every document's windows, in document order; documents with no window are left out."""
    out: dict[str, list[Passage]] = {}
    for doc in corpus:
        found = []
        for s, e in windows(doc, min_chars, max_chars):
            text = doc.text[s:e]
            language: PromptLanguage = prompt_language(text) if lang == "auto" else lang  # type: ignore[assignment]
            found.append(Passage(doc.id, s, e, text, doc.title, language))
        if found:
            out[doc.id] = found
    return out


def stratified(by_doc: dict[str, list[Passage]], seed: int) -> Iterator[Passage]:
    """Passages without end: each pass shuffles the documents and takes each one's next window in turn,
    so coverage is broad before any document repeats; windows run out and start over, reshuffled."""
    rng = random.Random(f"synth-passages:{seed}")
    while True:
        docs = sorted(by_doc)
        rng.shuffle(docs)
        orders = {d: rng.sample(by_doc[d], len(by_doc[d])) for d in docs}
        depth = max(len(v) for v in orders.values())
        for i in range(depth):
            for d in docs:
                if i < len(orders[d]):
                    yield orders[d][i]


def cycled(items: Sequence[tuple[Passage, Passage]], seed: int) -> Iterator[tuple[Passage, Passage]]:
    """Pairs without end, in a seeded order, reshuffled on every pass."""
    rng = random.Random(f"synth-pairs:{seed}")
    while items:
        yield from rng.sample(list(items), len(items))


class Lookahead(Generic[T]):
    """An endless iterator whose next item can be looked at without taking it."""

    def __init__(self, items: Iterator[T]) -> None:
        self._items = items
        self._next: T | None = None

    def peek(self) -> T:
        if self._next is None:
            self._next = next(self._items)
        return self._next

    def take(self) -> T:
        item = self.peek()
        self._next = None
        return item
