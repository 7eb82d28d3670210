"""`composer serve` under load: N requests at concurrency 1, 8 and 32 against the bundled sample's offline
(BM25, extractive) pipeline and an LLM pipeline on a local scripted OpenAI-compatible server with latency.

Reports client-seen p50/p95/p99, errors, the server's overhead (client latency minus the pipeline's own
time, read from each response's ``Server-Timing: pipeline;dur=``) and the start time from the command to
the first answer. The server runs as its own process (`composer serve`), as in production.

    .venv/bin/python benchmarks/bench_serve.py [--requests 500] [--llm-latency 0.05]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
from bench_retrieval import machine

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
SAMPLE = REPO / "examples" / "arcd-sample"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def loop_seconds() -> float:
    """A 10^7-step Python loop: how fast this machine runs plain Python."""
    t = time.perf_counter()
    for _ in range(10**7):
        pass
    return time.perf_counter() - t


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(config: Path, port: int) -> tuple[subprocess.Popen[bytes], float]:
    """`composer serve` on ``config``; seconds from launch to its first /ask answer."""
    t = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "composer", "serve", str(config), "--corpus",
                               str(SAMPLE / "corpus.jsonl"), "--port", str(port)], env=ENV,
                              stderr=subprocess.DEVNULL)
    while True:
        try:
            r = httpx.post(f"http://127.0.0.1:{port}/ask", json={"question": "من هو خاشقجي؟"}, timeout=60)
            if r.status_code == 200:
                return server, time.perf_counter() - t
        except httpx.TransportError:
            if server.poll() is not None:
                raise SystemExit("composer serve did not start") from None
            time.sleep(0.05)


def load(base: str, questions: list[str], n: int, concurrency: int) -> dict[str, float]:
    latencies, overheads, errors = [], [], 0
    with httpx.Client(base_url=base, timeout=60, limits=httpx.Limits(max_connections=concurrency)) as http:

        def one(i: int) -> None:
            nonlocal errors
            t = time.perf_counter()
            # Each question made unique: no memoized ranking, answer or cached LLM reply serves it.
            r = http.post("/ask", json={"question": f"{questions[i % len(questions)]} ({concurrency}-{i})"})
            ms = (time.perf_counter() - t) * 1e3
            if r.status_code != 200 or r.json()["answer"] is None:
                errors += 1
                return
            latencies.append(ms)
            overheads.append(ms - float(r.headers["server-timing"].split("dur=")[1]))

        started = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(one, range(n)))
        wall = time.perf_counter() - started
    p = np.percentile(latencies, [50, 95, 99])
    return {"concurrency": concurrency, "requests": n, "errors": errors, "p50_ms": p[0], "p95_ms": p[1],
            "p99_ms": p[2], "overhead_p50_ms": float(np.percentile(overheads, 50)),
            "overhead_p95_ms": float(np.percentile(overheads, 95)), "rps": n / wall}


def main() -> None:
    from fake_llm_server import FakeLLMServer
    from scripted_llm import ScriptedRAG

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500, help="Requests per concurrency level.")
    parser.add_argument("--llm-latency", type=float, default=0.05, help="Seconds the scripted LLM takes.")
    args = parser.parse_args()
    print(f"machine: {machine()}; 10^7-step Python loop: {loop_seconds():.2f} s")
    questions = [json.loads(line)["question"] for line in (SAMPLE / "questions.jsonl").open(encoding="utf-8")]
    scripted = FakeLLMServer(ScriptedRAG({}), latency=args.llm_latency)
    with tempfile.TemporaryDirectory() as tmp, scripted as llm:
        offline = Path(tmp) / "offline.yaml"
        offline.write_text(json.dumps({"retrieval": {"mode": "bm25", "k": 5}}))
        with_llm = Path(tmp) / "llm.yaml"
        with_llm.write_text(json.dumps({"retrieval": {"mode": "bm25", "k": 5},
                                        "generation": {"model": "openai/fake", "api_base": llm.url}}))
        for name, config in (("offline", offline), ("llm", with_llm)):
            port = free_port()
            server, start_s = start(config, port)
            try:
                print(f"{name}: start to first answer {start_s:.2f} s")
                for concurrency in (1, 8, 32):
                    row = load(f"http://127.0.0.1:{port}", questions, args.requests, concurrency)
                    print(f"{name}: " + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                                                  for k, v in row.items()), flush=True)
            finally:
                server.terminate()
                server.wait(30)


if __name__ == "__main__":
    main()
