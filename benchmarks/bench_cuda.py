"""The CUDA paths: a local sentence-transformers embedder and a cross-encoder reranker on cpu and on cuda.

    .venv/bin/python benchmarks/bench_cuda.py --model PATH [--cross-encoder PATH] [--paragraphs 460]

Prints one JSON object: for each device torch offers (cpu always, cuda when it sees a GPU), the model
load time, passages encoded per second (ARCD paragraphs, warm: a first batch loads the model), and
(query, passage) pairs scored per second by the cross-encoder, both through Composer's own classes
(``make_embedder`` with ``embedding.device``, ``CrossEncoderReranker`` with ``rerank.device``), caches
off the timed path. It also gives how far cuda's vectors and scores are from cpu's (largest absolute
difference of cosine similarity / score), so a GPU never changes which passages a study finds.

Without ``--cross-encoder``, one is made from the embedding model's transformer with a fresh one-logit
head (its scores are meaningless, its cost is a real cross-encoder's of that size).
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

import numpy as np

from composer.embedding import EmbeddingCache, make_embedder
from composer.embedding.config import Device, EmbeddingConfig
from composer.retrieval.rerank import CrossEncoderReranker

ARCD = Path(__file__).resolve().parents[1] / "examples" / "arcd"


def arcd_texts(name: str, field: str, n: int) -> list[str]:
    with (ARCD / name).open(encoding="utf-8") as f:
        return [json.loads(line)[field] for line in f if line.strip()][:n]


def make_cross_encoder(model: Path, out: Path) -> Path:
    """The embedding model's transformer under a fresh one-logit classification head."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.manual_seed(0)
    AutoModelForSequenceClassification.from_pretrained(str(model), num_labels=1).save_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(model)).save_pretrained(str(out))
    return out


def embed(model: Path, device: Device, texts: list[str]) -> tuple[dict[str, Any], np.ndarray]:
    embedder = make_embedder(
        EmbeddingConfig(provider="sentence-transformers", model=str(model), device=device)
    )
    start = time.perf_counter()
    embedder.encode_passages(texts[:4])
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    vectors = embedder.encode_passages(texts)
    seconds = time.perf_counter() - start
    return {"load_s": round(load_s, 2), "passages_per_s": round(len(texts) / seconds, 1)}, vectors


def rerank(
    model: Path, device: Device, queries: list[str], passages: list[str], work: Path
) -> tuple[dict[str, Any], np.ndarray]:
    reranker = CrossEncoderReranker(str(model), EmbeddingCache(work / device), batch_size=32, device=device)
    reranker.scores(queries[0], passages[:2])  # loads the model
    start = time.perf_counter()
    scores = np.concatenate([reranker.scores(q, passages) for q in queries])
    seconds = time.perf_counter() - start
    return {"pairs_per_s": round(scores.size / seconds, 1)}, scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", type=Path, required=True, help="a local sentence-transformers model folder"
    )
    parser.add_argument("--cross-encoder", type=Path, default=None)
    parser.add_argument("--paragraphs", type=int, default=460)
    parser.add_argument("--queries", type=int, default=20, help="each scored against every paragraph")
    args = parser.parse_args()

    import torch

    devices: list[Device] = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    passages = arcd_texts("corpus.jsonl", "text", args.paragraphs)
    queries = arcd_texts("questions.jsonl", "question", args.queries)
    result: dict[str, Any] = {
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if "cuda" in devices else None,
        "cpu_threads": torch.get_num_threads(),
        "paragraphs": len(passages),
        "pairs": len(passages) * len(queries),
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cross = args.cross_encoder or make_cross_encoder(args.model, work / "cross-encoder")
        vectors: dict[str, np.ndarray] = {}
        scores: dict[str, np.ndarray] = {}
        for device in devices:
            result[f"embedding_{device}"], vectors[device] = embed(args.model, device, passages)
            result[f"cross_encoder_{device}"], scores[device] = rerank(cross, device, queries, passages, work)
        if "cuda" in devices:
            cosine = np.sum(vectors["cpu"] * vectors["cuda"], axis=1) / (
                np.linalg.norm(vectors["cpu"], axis=1) * np.linalg.norm(vectors["cuda"], axis=1)
            )
            result["cuda_vs_cpu"] = {
                "embedding_min_cosine": round(float(cosine.min()), 6),
                "cross_encoder_max_abs_score_diff": float(np.abs(scores["cpu"] - scores["cuda"]).max()),
                "embedding_speedup": round(
                    result["embedding_cuda"]["passages_per_s"] / result["embedding_cpu"]["passages_per_s"], 1
                ),
                "cross_encoder_speedup": round(
                    result["cross_encoder_cuda"]["pairs_per_s"] / result["cross_encoder_cpu"]["pairs_per_s"],
                    1,
                ),
            }
    json.dump(result, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
