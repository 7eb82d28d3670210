"""The embedder contract shared by every provider, the cache and the index."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

import numpy as np

from composer.errors import ComposerError

Role = Literal["query", "passage"]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into float32, L2-normalized rows, so cosine similarity is a dot product.

    ``identity`` names the model exactly (provider, model, revision or content digest): it is part of
    every cache key, so two embedders with the same identity must produce the same vectors.
    The prefixes are prepended to each text before encoding (e5's "query: " / "passage: ").
    """

    @property
    def identity(self) -> str: ...

    @property
    def dim(self) -> int: ...

    @property
    def query_prefix(self) -> str: ...

    @property
    def passage_prefix(self) -> str: ...

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray: ...

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray: ...


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length as float32; zero rows stay zero instead of turning into NaN."""
    out = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)


class PrefixedEmbedder(ABC):
    """Applies the role prefix and normalization once, so providers only implement ``_encode``."""

    def __init__(self, *, query_prefix: str = "", passage_prefix: str = "") -> None:
        self._query_prefix = query_prefix
        self._passage_prefix = passage_prefix

    @property
    @abstractmethod
    def identity(self) -> str: ...

    @property
    @abstractmethod
    def dim(self) -> int: ...

    @property
    def query_prefix(self) -> str:
        return self._query_prefix

    @property
    def passage_prefix(self) -> str:
        return self._passage_prefix

    @abstractmethod
    def _encode(self, texts: list[str]) -> np.ndarray:
        """Encode already-prefixed texts (non-empty list) into an (n, dim) array."""

    def encode(self, texts: Sequence[str], role: Role) -> np.ndarray:
        prefix = self._query_prefix if role == "query" else self._passage_prefix
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._encode([prefix + t for t in texts])
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise ComposerError(f"{self.identity} returned shape {vectors.shape} for {len(texts)} texts")
        return l2_normalize(vectors)

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode(texts, "passage")

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode(texts, "query")
