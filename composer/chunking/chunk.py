"""Chunks: spans of a document's text with a stable id, so gold document ids map onto any chunking."""

from __future__ import annotations

from dataclasses import dataclass

from composer.chunking.methods import METHODS
from composer.data.types import Corpus, Document
from composer.pipeline.config import ChunkingConfig


@dataclass(frozen=True, slots=True)
class Chunk:
    """A span of one document: ``text == document.text[start:end]``.

    ``id`` is ``f"{doc_id}#{index}"``: the same document and config always give the same ids.
    """

    id: str
    doc_id: str
    text: str
    start: int
    end: int
    index: int


def chunk_document(doc: Document, cfg: ChunkingConfig) -> list[Chunk]:
    """The document's chunks in text order; never empty or whitespace-padded, at most ``cfg.size`` chars."""
    spans = METHODS[cfg.method](doc.text, cfg.size, cfg.overlap)
    return [
        Chunk(id=f"{doc.id}#{i}", doc_id=doc.id, text=doc.text[s:e], start=s, end=e, index=i)
        for i, (s, e) in enumerate(spans)
    ]


def chunk_corpus(corpus: Corpus, cfg: ChunkingConfig) -> list[Chunk]:
    """Every document's chunks, in corpus order."""
    return [chunk for doc in corpus for chunk in chunk_document(doc, cfg)]
