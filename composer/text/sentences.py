"""Sentence boundaries that know Arabic and Persian punctuation (؟ ؛ and newlines)."""

from __future__ import annotations

import re

Span = tuple[int, int]

# A sentence ends at . ! ? ؟ ؛ … or the Urdu/Persian full stop ۔ (and runs of them, with closing quotes or
# brackets) followed by space, or at a newline; the comma ، never ends one. The last sentence needs no final
# stop: Ragas drops such Arabic and Persian sentences.
_BOUNDARY = re.compile(r"(?:[.!?؟؛…۔]+[\"'»”)\]]*)(?=\s)|\n+")


def sentence_spans(text: str) -> list[Span]:
    """(start, end) character offsets of each non-empty sentence, whitespace trimmed."""
    return split_after(_BOUNDARY, text, 0, len(text))


def split_sentences(text: str) -> list[str]:
    return [text[s:e] for s, e in sentence_spans(text)]


def split_after(separator: re.Pattern[str], text: str, start: int, end: int) -> list[Span]:
    """The trimmed, non-empty pieces of ``text[start:end]`` cut right after each match of ``separator``,
    so a separator stays with the piece before it (sentences and every chunking level cut this way)."""
    pieces: list[Span] = []
    for m in separator.finditer(text, start, end):
        if (span := trim(text, start, m.end())) is not None:
            pieces.append(span)
        start = m.end()
    if (span := trim(text, start, end)) is not None:
        pieces.append(span)
    return pieces


def trim(text: str, start: int, end: int) -> Span | None:
    """The span without leading and trailing whitespace, or None when nothing else is left."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if end > start else None
