"""Chunks: spans of a document's text with a stable id, so gold document ids map onto any chunking."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from composer.chunking.config import ChunkingConfig
from composer.chunking.methods import METHODS
from composer.chunking.spans import Span
from composer.data.types import Corpus, Document


@dataclass(frozen=True, slots=True)
class Chunk:
    """A span of one document: ``text == document.text[start:end]``, what a hit returns and answers read.

    ``id`` is ``f"{doc_id}#{index}"``: the same document and config always give the same ids.
    ``indexed`` is the part of it the index encodes, when smaller (a sentence window's own sentence).
    ``page``/``last_page`` (PDF pages, slides) and ``heading`` (the heading path it falls under) come from
    the document's metadata, so a hit can be cited as "file, page"; ``title`` is the document's.
    """

    id: str
    doc_id: str
    text: str
    start: int
    end: int
    index: int
    indexed: tuple[int, int] | None = None
    title: str = ""
    page: int | None = None
    last_page: int | None = None
    heading: str | None = None

    @property
    def indexed_text(self) -> str:
        """What BM25 and the embedder see: the indexed span, else the whole chunk."""
        if self.indexed is None:
            return self.text
        return self.text[self.indexed[0] - self.start : self.indexed[1] - self.start]

    @property
    def citation(self) -> str:
        """``guide.pdf, page 3`` (``pages 3–4`` across a page break), else the document id."""
        if self.page is None:
            return self.doc_id
        if self.last_page is not None and self.last_page != self.page:
            return f"{self.doc_id}, pages {self.page}–{self.last_page}"
        return f"{self.doc_id}, page {self.page}"


class _Marks:
    """``(offset, value)`` pairs of a document's metadata: the value in force at an offset."""

    def __init__(self, pairs: Sequence[Any] | None) -> None:
        pairs = sorted((int(o), v) for o, v in (pairs or ()))
        self.offsets = [o for o, _ in pairs]
        self.values = [v for _, v in pairs]

    def at(self, offset: int) -> Any:
        i = bisect.bisect_right(self.offsets, offset) - 1
        return self.values[i] if i >= 0 else None


def chunk_document(doc: Document, cfg: ChunkingConfig) -> list[Chunk]:
    """The document's chunks in text order; never empty or whitespace-padded, at most ``cfg.size`` chars.

    With ``cfg.window`` each chunk is indexed as cut but returns ``window`` neighbouring chunks on each side
    with it (sentence windows: small units match a question precisely, the window gives the answerer the
    context around them); ids and indexed spans are those of the chunks without windows. With
    ``cfg.respect`` ``page`` or ``section`` no chunk (nor window) crosses a page start or a heading.
    """
    pages, headings = _Marks(doc.metadata.get("pages")), _Marks(doc.metadata.get("headings"))
    bounds = {"page": pages, "section": headings, "none": None}[cfg.respect]
    chunks: list[Chunk] = []
    for seg_start, seg_end in _segments(len(doc.text), bounds.offsets if bounds else []):
        piece = doc.text[seg_start:seg_end]
        spans = [(seg_start + s, seg_start + e) for s, e in METHODS[cfg.method](piece, cfg.size, cfg.overlap)]
        w = cfg.window
        for j, (s, e) in enumerate(spans):
            ws, we = (spans[max(0, j - w)][0], spans[min(len(spans) - 1, j + w)][1]) if w else (s, e)
            i = len(chunks)
            page = pages.at(s)
            chunks.append(Chunk(
                f"{doc.id}#{i}", doc.id, doc.text[ws:we], ws, we, i, indexed=(s, e) if w else None,
                title=doc.title, page=page, last_page=pages.at(e - 1) if page is not None else None,
                heading=headings.at(s),
            ))
    return chunks


def _segments(length: int, offsets: Sequence[int]) -> list[Span]:
    cuts = sorted({0, length, *(o for o in offsets if 0 < o < length)})
    return list(itertools.pairwise(cuts))


def chunk_corpus(corpus: Corpus, cfg: ChunkingConfig) -> list[Chunk]:
    """Every document's chunks, in corpus order."""
    return [chunk for doc in corpus for chunk in chunk_document(doc, cfg)]
