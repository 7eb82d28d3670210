"""Character spans and the two operations every chunker is built from: splitting and packing.

A span is ``(start, end)`` into the document text. Splitters return trimmed, non-empty spans, so every
chunk built from them starts and ends on a non-space character and its offsets stay exact.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence

from composer.text.sentences import Span, sentence_spans, split_after, trim

Splitter = Callable[[str, int, int], list[Span]]
"""Split ``text[start:end]`` into trimmed pieces; one piece back means "no split point here"."""


def cut_after(pattern: str) -> Splitter:
    """A splitter that cuts right after each match, so a separator stays with the piece before it."""
    return functools.partial(split_after, re.compile(pattern))


def sentences(text: str, start: int, end: int) -> list[Span]:
    """Sentences as composer.text splits them (. ! ? ؟ ؛ … and newlines; ، does not end a sentence)."""
    return [(start + s, start + e) for s, e in sentence_spans(text[start:end])]


blank_lines = cut_after(r"\n[^\S\n]*\n\s*")
lines = cut_after(r"\n")
arabic_commas = cut_after(r"،")
commas = cut_after(r",(?=\s)")  # not inside numbers such as 1,000
clauses = cut_after(r"،|,(?=\s)")
words = cut_after(r"\s+")


def split_flat(text: str, start: int, end: int, size: int, levels: Sequence[Splitter]) -> list[Span]:
    """Pieces of at most ``size`` chars, each cut at the coarsest level that splits it, in text order."""
    flat: list[Span] = []
    for span, rest in _split_once(text, start, end, size, levels):
        flat += [span] if rest is None else split_flat(text, *span, size, rest)
    return flat


def split_recursive(
    text: str, start: int, end: int, size: int, overlap: int, levels: Sequence[Splitter]
) -> list[Span]:
    """LangChain's recursive splitting: pieces that fit are packed greedily with their siblings, a piece
    still too long is split by the next levels on its own, so no chunk crosses a coarser boundary
    than it has to."""
    chunks: list[Span] = []
    run: list[Span] = []
    for span, rest in _split_once(text, start, end, size, levels):
        if rest is None:
            run.append(span)
            continue
        chunks += pack(run, size, overlap)
        run = []
        chunks += split_recursive(text, *span, size, overlap, rest)
    return chunks + pack(run, size, overlap)


def _split_once(
    text: str, start: int, end: int, size: int, levels: Sequence[Splitter]
) -> list[tuple[Span, Sequence[Splitter] | None]]:
    """Split at the first level that splits; each piece comes with the levels left to split it further,
    or None when it fits. A piece no level splits (one very long "word") is cut every ``size`` chars."""
    span = trim(text, start, end)
    if span is None:
        return []
    start, end = span
    if end - start <= size:
        return [(span, None)]
    for depth, level in enumerate(levels):
        pieces = level(text, start, end)
        if len(pieces) > 1:
            rest = levels[depth + 1 :]
            return [((s, e), None if e - s <= size else rest) for s, e in pieces]
    return [((s, min(s + size, end)), None) for s in range(start, end, size)]


def pack(pieces: Sequence[Span], size: int, overlap: int = 0, *, even: bool = False) -> list[Span]:
    """Group consecutive pieces (each at most ``size`` long) into windows of at most ``size`` chars.

    Consecutive windows share whole pieces covering at most ``overlap`` chars. With ``even`` the
    windows aim at one common length instead of filling up greedily, so the last one is not a scrap
    (850 chars at size 800 become two chunks of ~425, not 800 + 50).
    """
    if not pieces:
        return []
    windows: list[Span] = []
    first, last = 0, -1  # pieces of the current window: first..j; the previous window ended at `last`
    while True:
        start = pieces[first][0]
        target = _even_target(pieces[-1][1] - start, size, overlap) if even else size
        j = last + 1  # each window reaches past the previous one
        while j + 1 < len(pieces):
            grown = pieces[j + 1][1] - start
            if grown > size or (grown > target and grown - target > target - (pieces[j][1] - start)):
                break
            j += 1
        end = pieces[j][1]
        windows.append((start, end))
        if j == len(pieces) - 1:
            return windows
        # The next window steps back over pieces lying within `overlap` of this end, keeping room for
        # the piece after it, and always starts after this window's first piece.
        last, nxt = j, j + 1
        while (
            nxt - 1 > first
            and pieces[nxt - 1][0] >= end - overlap
            and pieces[j + 1][1] - pieces[nxt - 1][0] <= size
        ):
            nxt -= 1
        first = nxt


def _even_target(remaining: int, size: int, overlap: int) -> float:
    """The window length that cuts ``remaining`` chars into the fewest windows of equal length."""
    if remaining <= size:
        return size
    n = math.ceil((remaining - overlap) / (size - overlap))
    return overlap + (remaining - overlap) / n
