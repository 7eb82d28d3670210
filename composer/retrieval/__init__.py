"""Everything before an answer: query expansion, first-stage candidates, fusion, reranking, ranking."""

from composer.retrieval.rerank import (
    CrossEncoderReranker,
    LLMRerank,
    MmrReranker,
    NoReranker,
    Reranker,
    make_reranker,
    mmr_order,
)

__all__ = [
    "CrossEncoderReranker",
    "LLMRerank",
    "MmrReranker",
    "NoReranker",
    "Reranker",
    "make_reranker",
    "mmr_order",
]
