"""`composer synth` throughput against the local fake server: questions per minute at a given latency and
concurrency, the share each filter keeps, and a rerun from the reply cache.

The server runs in its own process with the scripted question writer of the tests (``tests/scripted_synth``:
questions built from the passage's own words, every check passed), answering each request after a fixed
latency; it measures the pipeline (rounds, filters, concurrency, cache), not a model's quality. The ideal
wall time is requests / concurrency x latency; the rerun uses a fresh client on the same cache directory
and must reach the server zero times.

    .venv/bin/python benchmarks/bench_synth.py --corpus examples/arcd-sample/corpus.jsonl \
        [--n 100] [--latency 0.5] [--concurrency 8] [--seed 0] [--examples 4] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_judges import fake_server, server_stats  # noqa: E402

if TYPE_CHECKING:
    from fake_llm_server import Route


def _scripted_route(corpus: str) -> Route:
    """The tests' scripted question writer over ``corpus`` (built in the server's process)."""
    from scripted_synth import ScriptedSynth

    from composer.data import load_corpus

    return ScriptedSynth(load_corpus(corpus))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", required=True, type=Path)
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--latency", type=float, default=0.5, help="seconds the server takes per request")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--examples", type=int, default=4, help="generated questions to print per language")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()

    from composer.data import load_corpus
    from composer.llm import LLMClient, LLMConfig
    from composer.synth import SynthConfig, synthesize

    with fake_server(partial(_scripted_route, str(args.corpus)), args.latency) as url:
        corpus = load_corpus(args.corpus)
        llm = LLMConfig(model="openai/writer", api_base=url, max_concurrency=args.concurrency)
        config = SynthConfig(n=args.n, llm=llm, seed=args.seed)
        with tempfile.TemporaryDirectory() as cache:
            LLMClient(
                llm, cache_dir=cache
            )  # imports litellm before the clock starts, as a warm process would
            started = time.perf_counter()
            outcome = synthesize(corpus, config, LLMClient(llm, cache_dir=cache))
            seconds = time.perf_counter() - started
            requests = server_stats(url)["chat_requests"]
            started = time.perf_counter()
            rerun = synthesize(corpus, config, LLMClient(llm, cache_dir=cache))
            rerun_seconds = time.perf_counter() - started
            rerun_requests = server_stats(url)["chat_requests"] - requests
        peak = server_stats(url)["max_in_flight"]

    report = outcome.report
    figures: dict[str, Any] = {
        "corpus": str(args.corpus),
        "documents": len(corpus),
        "n": args.n,
        "kept": report["kept"],
        "generated": report["generated"],
        "rounds": report["rounds"],
        "latency_s": args.latency,
        "concurrency": args.concurrency,
        "requests": requests,
        "max_in_flight": peak,
        "seconds": round(seconds, 2),
        "questions_per_minute": round(60 * report["kept"] / seconds, 1),
        "ideal_seconds": round(requests * args.latency / args.concurrency, 2),
        "filters_kept_share": {r: f["kept_share"] for r, f in report["filters"].items() if f["checked"]},
        "dropped": {r: c for r, c in report["dropped"].items() if c},
        "kinds": {k: v["kept"] for k, v in report["by_kind"].items()},
        "documents_asked": report["passages"]["documents_asked"],
        "rerun_requests": rerun_requests,
        "rerun_seconds": round(rerun_seconds, 2),
        "rerun_identical": rerun.rows == outcome.rows,
    }
    if args.json:
        print(json.dumps(figures, ensure_ascii=False, indent=2))
        return
    print(
        f"{figures['documents']} documents, n={args.n}: kept {report['kept']} from {report['generated']} "
        f"generated in {report['rounds']} rounds ({figures['documents_asked']} documents asked about)"
    )
    print(
        f"latency {args.latency}s, concurrency {args.concurrency}: {requests} requests in {seconds:.1f}s "
        f"(ideal {figures['ideal_seconds']}s, peak {peak} in flight) -> "
        f"{figures['questions_per_minute']} questions/minute"
    )
    print(
        "share kept by each filter: "
        + ", ".join(f"{r} {s:.1%}" for r, s in figures["filters_kept_share"].items())
    )
    print("dropped: " + (", ".join(f"{r} {c}" for r, c in figures["dropped"].items()) or "none"))
    print(f"kept by kind: {figures['kinds']}")
    print(
        f"rerun with the same seed: {rerun_requests} requests, {rerun_seconds:.2f}s, "
        f"identical set: {figures['rerun_identical']}"
    )
    shown: dict[str, int] = {}
    for row in outcome.rows:
        key = row["metadata"]["kind"]
        if shown.get(key, 0) < max(1, args.examples // 4):
            shown[key] = shown.get(key, 0) + 1
            print(
                json.dumps(
                    {k: row[k] for k in ("id", "question", "reference_answer", "relevant_ids")}
                    | {"kind": key},
                    ensure_ascii=False,
                )
            )


if __name__ == "__main__":
    main()
