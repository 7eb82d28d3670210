"""Passages that stand in for what retrieval would return, so that a cost estimate builds prompts of the
right size without an index: the question's own documents first, then others of the corpus, cut by the
configuration's chunking. Two configurations that rank differently (any setting but the generator's)
get different others: their prompts differ, as a real ranking's would, and no cached reply serves both."""

from __future__ import annotations

import hashlib

from composer.chunking.chunk import chunk_document
from composer.data.types import Corpus, Document, Question
from composer.pipeline.config import PipelineConfig

FILLERS = 50
"""Documents, from the corpus's start, that fill the hits a question's own documents leave."""


class StandInPassages:
    """``passages(question, config)``: as many passages as ``config`` reads (its ``k``, its reranker's
    ``top_n``), chunked as it chunks; chunkings are memoized per document."""

    def __init__(self, corpus: Corpus) -> None:
        self.documents = {d.id: d for d in corpus.documents}
        self.fillers = list(corpus.documents[:FILLERS])
        self._chunks: dict[tuple[str, str], list[str]] = {}

    def __call__(self, question: Question, config: PipelineConfig) -> list[str]:
        depth = max(config.retrieval.k, config.rerank.top_n if config.rerank.method == "llm" else 0)
        own = [d for rid in question.relevant_ids if (d := self._document(rid)) is not None]
        seen = {d.id for d in own}
        others = [d for d in self.fillers if d.id not in seen]
        turn = _ranking_seed(config) % max(len(others), 1)
        out: list[str] = []
        for doc in [*own, *others[turn:], *others[:turn]]:
            out += self._chunked(doc, config)
            if len(out) >= depth:
                break
        return out[:depth]

    def _document(self, relevant_id: str) -> Document | None:
        """The document an id names: a document id, or a chunk id (``doc#3``)."""
        return self.documents.get(relevant_id) or self.documents.get(relevant_id.rpartition("#")[0])

    def _chunked(self, doc: Document, config: PipelineConfig) -> list[str]:
        slot = (config.chunking.model_dump_json(), doc.id)
        if slot not in self._chunks:
            self._chunks[slot] = [c.text for c in chunk_document(doc, config.chunking) if c.text.strip()]
        return self._chunks[slot]


def _ranking_seed(config: PipelineConfig) -> int:
    """A number for how ``config`` ranks: equal for configurations that differ in generation only."""
    ranking = config.model_dump_json(exclude={"generation"})
    return int(hashlib.sha256(ranking.encode()).hexdigest()[:8], 16)
