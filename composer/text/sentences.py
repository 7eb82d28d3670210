"""Sentence boundaries that know Arabic and Persian punctuation (؟ ؛ and newlines)."""

from __future__ import annotations

import re

# A sentence ends at . ! ? ؟ ؛ … or the Urdu/Persian full stop ۔ (and runs of them, with closing quotes or
# brackets) followed by space, or at a newline; the comma ، never ends one. The last sentence needs no final
# stop: Ragas drops such Arabic and Persian sentences.
_BOUNDARY = re.compile(r"(?:[.!?؟؛…۔]+[\"'»”)\]]*)(?=\s)|\n+")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) character offsets of each non-empty sentence, whitespace trimmed."""
    spans: list[tuple[int, int]] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        _append_trimmed(text, start, m.end(), spans)
        start = m.end()
    _append_trimmed(text, start, len(text), spans)
    return spans


def split_sentences(text: str) -> list[str]:
    return [text[s:e] for s, e in sentence_spans(text)]


def _append_trimmed(text: str, start: int, end: int, spans: list[tuple[int, int]]) -> None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if end > start:
        spans.append((start, end))
