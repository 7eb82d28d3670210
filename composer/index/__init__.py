"""Qdrant indexes: BM25 sparse encoding over our ar/fa/en tokens, and two backends behind one protocol."""

from __future__ import annotations

import os
from pathlib import Path

from composer.errors import InputError
from composer.index.base import ChunkLike, VectorIndex
from composer.index.bm25 import Bm25Encoder, SparseVector
from composer.index.client import ClientBackend
from composer.index.edge import EdgeBackend
from composer.llm.faults import register_secret

QDRANT_API_KEY_ENV = "QDRANT_API_KEY"


def open_index(location: str | None, workdir: str | Path, api_key: str | None = None) -> VectorIndex:
    """The backend for a location: ``None`` or ``"edge"`` means Qdrant Edge under ``<workdir>/qdrant``,
    ``":memory:"`` or an ``http(s)://`` URL means qdrant-client.

    A server's API key is ``api_key``, else ``$QDRANT_API_KEY``: read from the environment here, so it
    never sits in a config file, shell history or process list, and is kept out of every log record.
    That default is for a location the user gave (``--qdrant``, the experiment's ``qdrant:``); ``api_key``
    ``""`` sends none, for a location a model names (its key variable goes through ``composer.secrets``).
    A ``:memory:`` index lives as long as the returned object: keep it for both indexing and searching.
    """
    if location in (None, "edge"):
        return EdgeBackend(Path(workdir) / "qdrant")
    if location == ":memory:":
        return ClientBackend(location)
    if location.startswith(("http://", "https://")):
        key = (os.environ.get(QDRANT_API_KEY_ENV) if api_key is None else api_key) or None
        register_secret(key)
        return ClientBackend(location, api_key=key)
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
