"""Second-stage ordering of retrieved chunks (rerankers); first-stage search lives in ``composer.index``."""

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
