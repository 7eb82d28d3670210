"""Qdrant indexes: BM25 sparse encoding over our ar/fa/en tokens, and two backends behind one protocol."""

from __future__ import annotations

from pathlib import Path

from composer.errors import InputError
from composer.index.base import ChunkLike, VectorIndex
from composer.index.bm25 import Bm25Encoder, SparseVector
from composer.index.client import ClientBackend
from composer.index.edge import EdgeBackend


def open_index(location: str | None, workdir: str | Path, api_key: str | None = None) -> VectorIndex:
    """The backend for a location: ``None`` or ``"edge"`` means Qdrant Edge under ``<workdir>/qdrant``,
    ``":memory:"`` or an ``http(s)://`` URL means qdrant-client.

    A ``:memory:`` index lives as long as the returned object: keep it for both indexing and searching.
    """
    if location in (None, "edge"):
        return EdgeBackend(Path(workdir) / "qdrant")
    if location == ":memory:" or location.startswith(("http://", "https://")):
        return ClientBackend(location, api_key=api_key)
    raise InputError(
        f"unknown Qdrant location {location!r}: use 'edge', ':memory:' or an http(s):// URL", field="qdrant"
    )


__all__ = [
    "Bm25Encoder",
    "ChunkLike",
    "ClientBackend",
    "EdgeBackend",
    "SparseVector",
    "VectorIndex",
    "open_index",
]
