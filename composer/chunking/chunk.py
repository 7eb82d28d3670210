"""Chunks: spans of a document's text with a stable id, so gold document ids map onto any chunking."""

from __future__ import annotations

from dataclasses import dataclass

from composer.chunking.methods import METHODS
from composer.data.types import Corpus, Document
from composer.pipeline.config import ChunkingConfig


@dataclass(frozen=True, slots=True)
class Chunk:
    """A span of one document: ``text == document.text[start:end]``, what a hit returns and answers read.

    ``id`` is ``f"{doc_id}#{index}"``: the same document and config always give the same ids.
    ``indexed`` is the part of it the index encodes, when smaller (a sentence window's own sentence).
    """

    id: str
    doc_id: str
    text: str
    start: int
    end: int
    index: int
    indexed: tuple[int, int] | None = None

    @property
    def indexed_text(self) -> str:
        """What BM25 and the embedder see: the indexed span, else the whole chunk."""
        if self.indexed is None:
            return self.text
        return self.text[self.indexed[0] - self.start : self.indexed[1] - self.start]


def chunk_document(doc: Document, cfg: ChunkingConfig) -> list[Chunk]:
    """The document's chunks in text order; never empty or whitespace-padded, at most ``cfg.size`` chars.

    With ``cfg.window`` each chunk is indexed as cut but returns ``window`` neighbouring chunks on each side
    with it (sentence windows: small units match a question precisely, the window gives the answerer the
    context around them); ids and indexed spans are those of the chunks without windows.
    """
    spans = METHODS[cfg.method](doc.text, cfg.size, cfg.overlap)
    w = cfg.window
    chunks = []
    for i, (s, e) in enumerate(spans):
        if w:
            ws, we = spans[max(0, i - w)][0], spans[min(len(spans) - 1, i + w)][1]
            chunk = Chunk(f"{doc.id}#{i}", doc.id, doc.text[ws:we], ws, we, i, indexed=(s, e))
        else:
            chunk = Chunk(f"{doc.id}#{i}", doc.id, doc.text[s:e], s, e, i)
        chunks.append(chunk)
    return chunks


def chunk_corpus(corpus: Corpus, cfg: ChunkingConfig) -> list[Chunk]:
    """Every document's chunks, in corpus order."""
    return [chunk for doc in corpus for chunk in chunk_document(doc, cfg)]
