"""Text embeddings: providers behind one protocol, and a content-addressed cache in front of them."""

from composer.embedding.base import Embedder, PrefixedEmbedder, Role, l2_normalize
from composer.embedding.cache import EmbeddingCache, cache_key
from composer.embedding.cached import CachedEmbedder, ProgressCallback
from composer.embedding.factory import make_embedder

__all__ = [
    "CachedEmbedder",
    "Embedder",
    "EmbeddingCache",
    "PrefixedEmbedder",
    "ProgressCallback",
    "Role",
    "cache_key",
    "l2_normalize",
    "make_embedder",
]
