"""An embedder that encodes each distinct text once per model, ever, through the disk cache."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from composer.embedding.actors import PooledEmbedder
from composer.embedding.base import Embedder, Role
from composer.embedding.cache import EmbeddingCache, cache_key

ProgressCallback = Callable[[int, int], None]
"""Called as ``on_progress(done, total)`` over the texts that actually need encoding."""


class CachedEmbedder:
    """Wraps an :class:`Embedder`: looks every text up, encodes only the distinct misses, stores them.

    Misses are encoded and stored in blocks of ``block_size``, so an interrupted run keeps what it
    paid for; on encoding actors, blocks large enough to keep every actor busy
    (``EncoderPool.block``). ``computed`` counts texts encoded, ``reused`` texts served without encoding
    (cache hits and repeats within one call); per call they add up to the number of texts asked for.
    """

    def __init__(
        self,
        embedder: Embedder,
        cache: EmbeddingCache,
        *,
        block_size: int = 256,
        on_progress: ProgressCallback | None = None,
    ) -> None:
        self.embedder = embedder
        self.cache = cache
        self.block_size = block_size
        self.on_progress = on_progress
        self.computed = 0
        self.reused = 0
        self._count_lock = threading.Lock()

    @property
    def identity(self) -> str:
        return self.embedder.identity

    @property
    def dim(self) -> int:
        dim = self.cache.model_dim(self.identity)
        if dim is None:
            dim = self.embedder.dim
            self.cache.record_model_dim(self.identity, dim)
        return dim

    @property
    def query_prefix(self) -> str:
        return self.embedder.query_prefix

    @property
    def passage_prefix(self) -> str:
        return self.embedder.passage_prefix

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, "passage")

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, "query")

    def _encode(self, texts: Sequence[str], role: Role) -> np.ndarray:
        identity = self.identity
        prefix = self.query_prefix if role == "query" else self.passage_prefix
        keys = [cache_key(identity, role, prefix, text) for text in texts]
        distinct = dict(zip(keys, texts, strict=True))
        # a stored vector of another length than the model's is damaged (the model's dim, once recorded)
        vectors = self.cache.get_many(list(distinct), dim=self.cache.model_dim(identity))
        missing = [key for key in distinct if key not in vectors]
        self._compute(missing, [distinct[key] for key in missing], role, vectors)
        with self._count_lock:  # the index may encode from several threads
            self.computed += len(missing)
            self.reused += len(texts) - len(missing)
        if not keys:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([vectors[key] for key in keys]).astype(np.float32, copy=False)

    def _compute(
        self, keys: list[bytes], texts: list[str], role: Role, into: dict[bytes, np.ndarray]
    ) -> None:
        total = len(texts)
        if self.on_progress is not None:
            self.on_progress(0, total)
        encode = self.embedder.encode_queries if role == "query" else self.embedder.encode_passages
        size = max(self.block_size, self.embedder.pool.block) if isinstance(self.embedder, PooledEmbedder) \
            else self.block_size
        for start in range(0, total, size):
            block_keys = keys[start : start + size]
            block_texts = texts[start : start + size]
            block = encode(block_texts)
            if start == 0:
                self.cache.record_model_dim(self.identity, int(block.shape[1]))
            self.cache.put_many(block_keys, block)
            into.update(zip(block_keys, block, strict=True))
            if self.on_progress is not None:
                self.on_progress(min(start + len(block_keys), total), total)
