"""qdrant-client: a Qdrant server or cluster (``url``, ``api_key``), or the client's local ``:memory:`` mode.

Collection metadata (Qdrant ≥ 1.16 and local mode) holds ``{"composer": {"dim", "complete", "meta"}}``:
it travels with the collection, so every worker sharing a server reads the BM25 stats and the completion
flag from the same place, and no reserved point pollutes counts or searches. ``:memory:`` is checked here
to support sparse vectors with the IDF modifier, prefetch and RRF/DBSF fusion; it scans exhaustively in
Python, so it suits tests and small corpora, not speed.

Workers sharing a server may start the same new index at once; one's ``create`` then drops the other's
build. Each build carries a token in the metadata, and ``finish`` marks complete only its own build, so
such a race fails a trial loudly instead of marking another worker's half-filled collection complete.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from composer.errors import ComposerError
from composer.index.base import (
    DENSE,
    QUERY_BATCH,
    SPARSE,
    ChunkLike,
    Found,
    Fusion,
    IndexBuildLost,
    batched,
    hybrid_queries,
    point_batches,
    point_id,
    query_rows,
    require_dense,
)
from composer.index.bm25 import SparseVector

if TYPE_CHECKING:
    from qdrant_client import QdrantClient

_META_KEY = "composer"


class ClientBackend:
    """Collections on a Qdrant server (``location`` = ``http(s)://...``) or in this process (``:memory:``)."""

    def __init__(self, location: str = ":memory:", api_key: str | None = None) -> None:
        from qdrant_client import QdrantClient

        self.location = location
        self.local = location == ":memory:"
        if location == ":memory:":
            self.client: QdrantClient = QdrantClient(location=":memory:")
        else:
            self.client = QdrantClient(url=location, api_key=api_key)
        self._builds: dict[str, str] = {}  # collection -> token of the build this backend started

    def exists(self, name: str) -> bool:
        state = self._state(name)
        return bool(state and state.get("complete"))

    def create(self, name: str, dim: int | None, meta: dict[str, Any]) -> None:
        from qdrant_client import models

        self.drop(name)
        vectors = {DENSE: models.VectorParams(size=dim, distance=models.Distance.COSINE)} if dim else {}
        token = self._builds[name] = uuid.uuid4().hex
        self.client.create_collection(
            name,
            vectors_config=vectors,
            sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
            metadata={_META_KEY: {"dim": dim, "complete": False, "meta": meta, "build": token}},
        )

    def upsert(
        self,
        name: str,
        chunks: Sequence[ChunkLike],
        dense: np.ndarray | None,
        sparse: Sequence[SparseVector] | None,
    ) -> None:
        from qdrant_client import models

        for batch in point_batches(chunks, dense, sparse, _sparse):
            points = [models.PointStruct(id=pid, vector=vector, payload=data) for pid, vector, data in batch]
            self.client.upsert(name, points, wait=True)

    def finish(self, name: str) -> None:
        """Servers index in the background on their own; only the completion flag is ours to set."""
        state = self._state(name)
        if state is None:
            raise IndexBuildLost(f"index {name!r} vanished during its build")
        if state.get("build") != self._builds.get(name):
            raise IndexBuildLost(f"index {name!r} was rebuilt by another worker during this build; "
                                "run again: the finished one is reused")
        self.client.update_collection(name, metadata={_META_KEY: {**state, "complete": True}})
        self._builds.pop(name, None)

    def drop(self, name: str) -> None:
        if self.client.collection_exists(name):
            self.client.delete_collection(name)

    def count(self, name: str) -> int:
        return int(self.client.count(name, exact=True).count)

    def meta(self, name: str) -> dict[str, Any]:
        state = self._state(name)
        if state is None:
            raise ComposerError(f"no index {name!r} at {self.location}")
        return dict(state["meta"])

    def where(self, name: str) -> str:
        return f"{name!r} at {self.location}"

    def texts(self, name: str, chunk_ids: Sequence[str]) -> dict[str, str]:
        """Chunk id -> text of those of ``chunk_ids`` that collection ``name`` holds: a server's points
        carry their text (``payload``), what ``composer label`` reads when nothing else has it."""
        if not chunk_ids or not self.client.collection_exists(name):
            return {}
        ids = [point_id(i) for i in chunk_ids]
        points = self.client.retrieve(name, ids, with_payload=["chunk_id", "text"])
        return {str(p.payload["chunk_id"]): str(p.payload["text"]) for p in points
                if p.payload and "chunk_id" in p.payload and "text" in p.payload}

    def scan(
        self, name: str, dense: np.ndarray | None, sparse: SparseVector
    ) -> tuple[Found | None, Found]:
        from qdrant_client import models

        limit = max(self.count(name), 1)
        exact = None if self.location == ":memory:" else models.SearchParams(exact=True)  # local: always

        def every(query: Any, using: str) -> Found:
            response = self.client.query_points(
                name, query=query, using=using, limit=limit, with_payload=False, search_params=exact
            )
            return [(str(p.id), float(p.score)) for p in response.points]

        found = None if dense is None else every(query_rows(dense[None])[0], DENSE)
        return found, every(_sparse(sparse), SPARSE)

    def search_dense(self, name: str, queries: np.ndarray, k: int) -> list[Found]:
        from qdrant_client import models

        require_dense(name, self._state(name))
        return self._run(
            name,
            [
                models.QueryRequest(query=q, using=DENSE, limit=k)
                for q in query_rows(queries)
            ],
        )

    def search_bm25(self, name: str, queries: Sequence[SparseVector], k: int) -> list[Found]:
        from qdrant_client import models

        return self._run(
            name,
            [
                models.QueryRequest(query=_sparse(q), using=SPARSE, limit=k)
                for q in queries
            ],
        )

    def search_hybrid(
        self,
        name: str,
        dense: np.ndarray,
        sparse: Sequence[SparseVector],
        k: int,
        *,
        fusion: Fusion = "rrf",
        prefetch: int = 50,
        rrf_k: int = 60,
    ) -> list[Found]:
        from qdrant_client import models

        require_dense(name, self._state(name))
        pairs = hybrid_queries(dense, sparse)
        fuse: models.RrfQuery | models.FusionQuery = (
            models.RrfQuery(rrf=models.Rrf(k=rrf_k))
            if fusion == "rrf"
            else models.FusionQuery(fusion=models.Fusion.DBSF)
        )
        limit = max(prefetch, k)
        requests = [
            models.QueryRequest(
                prefetch=[
                    models.Prefetch(query=d, using=DENSE, limit=limit),
                    models.Prefetch(query=_sparse(s), using=SPARSE, limit=limit),
                ],
                query=fuse,
                limit=k,
            )
            for d, s in pairs
        ]
        return self._run(name, requests)

    def close(self) -> None:
        self.client.close()

    def _run(self, name: str, requests: list[Any]) -> list[Found]:
        out: list[Found] = []
        for batch in batched(requests, QUERY_BATCH):
            for response in self.client.query_batch_points(name, batch):
                out.append([(str(p.id), float(p.score)) for p in response.points])
        return out

    def _state(self, name: str) -> dict[str, Any] | None:
        if not self.client.collection_exists(name):
            return None
        metadata = self.client.get_collection(name).config.metadata or {}
        state = metadata.get(_META_KEY)
        return dict(state) if isinstance(state, dict) else None


def _sparse(vec: SparseVector) -> Any:
    from qdrant_client import models

    return models.SparseVector(indices=list(vec.indices), values=list(vec.values))
