"""The four chunking methods. Each maps a text to chunk spans of at most ``size`` characters.

Overlap is shared between consecutive chunks cut from one run of text, never added across whole
paragraphs. Chunk text is document text only: titles stay on the Document, and a pipeline that wants
them in the embedded text prepends them there, so offsets keep pointing into ``Document.text``.
"""

from __future__ import annotations

from collections.abc import Callable

from composer.chunking.spans import (
    Span,
    arabic_commas,
    blank_lines,
    clauses,
    commas,
    lines,
    pack,
    sentences,
    split_flat,
    split_recursive,
    words,
)

ChunkMethod = Callable[[str, int, int], list[Span]]
"""(text, size, overlap) -> spans."""

SENTENCE_LEVELS = (sentences, clauses, words)
RECURSIVE_LEVELS = (blank_lines, lines, sentences, arabic_commas, commas, words)


def paragraph_chunks(text: str, size: int, overlap: int) -> list[Span]:
    """One chunk per paragraph; a paragraph longer than ``size`` is cut like the sentence method.

    Paragraphs are separated by blank lines; a text without blank lines uses one paragraph per line.
    A paragraph shorter than a quarter of ``size`` (a heading, a caption, a one-line list item) joins
    the paragraphs after it, or the one before it at the very end, while the group fits ``size``:
    a bare heading is a poor retrieval unit.
    """
    paragraphs = blank_lines(text, 0, len(text))
    if len(paragraphs) <= 1:
        paragraphs = lines(text, 0, len(text))
    chunks: list[Span] = []
    for start, end in _join_short(paragraphs, size, size // 4):
        chunks += _pack_sentences(text, start, end, size, overlap)
    return chunks


def fixed_char_chunks(text: str, size: int, overlap: int) -> list[Span]:
    """Windows of up to ``size`` chars sharing up to ``overlap``, cut between words only.

    A word longer than ``size`` is the one thing cut in the middle.
    """
    return pack(split_flat(text, 0, len(text), size, (words,)), size, overlap)


def sentence_chunks(text: str, size: int, overlap: int) -> list[Span]:
    """Whole sentences packed up to ``size``, evenly, so the last chunk is not a scrap.

    Only a sentence longer than ``size`` is cut, after its commas (Arabic ، and Latin ,), then between
    words; its pieces pack with the neighbouring sentences.
    """
    return _pack_sentences(text, 0, len(text), size, overlap)


def recursive_chunks(text: str, size: int, overlap: int) -> list[Span]:
    """LangChain's recursive splitter: blank lines, lines, sentences, ،, ",", words; greedy packing."""
    return split_recursive(text, 0, len(text), size, overlap, RECURSIVE_LEVELS)


METHODS: dict[str, ChunkMethod] = {
    "paragraph": paragraph_chunks,
    "fixed_chars": fixed_char_chunks,
    "sentence": sentence_chunks,
    "recursive": recursive_chunks,
}


def _pack_sentences(text: str, start: int, end: int, size: int, overlap: int) -> list[Span]:
    return pack(split_flat(text, start, end, size, SENTENCE_LEVELS), size, overlap, even=True)


def _join_short(paragraphs: list[Span], size: int, short: int) -> list[Span]:
    groups: list[Span] = []
    for start, end in paragraphs:
        if groups and groups[-1][1] - groups[-1][0] < short and end - groups[-1][0] <= size:
            groups[-1] = (groups[-1][0], end)
        else:
            groups.append((start, end))
    if len(groups) > 1 and groups[-1][1] - groups[-1][0] < short and groups[-1][1] - groups[-2][0] <= size:
        groups[-2:] = [(groups[-2][0], groups[-1][1])]
    return groups
