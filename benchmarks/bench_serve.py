"""`composer serve` under load: N requests at concurrency 1, 8 and 32 against the bundled sample's offline
(BM25, extractive) pipeline and an LLM pipeline on a local scripted OpenAI-compatible server with latency.

Reports client-seen p50/p95/p99, errors, the server's overhead (client latency minus the pipeline's own
time, read from each response's ``Server-Timing: pipeline;dur=``) and the start time from the command to
the first answer. The server runs as its own process (`composer serve`), as in production.

    .venv/bin/python benchmarks/bench_serve.py [--requests 500] [--llm-latency 0.05]

``--registry [SIZE ...]`` measures the registered winner instead, on the bundled sample and on ARCD plus
SIZE chunks of distractors (``bench_scale.py``'s corpus; 250,000 chunks = ARCD + 200,000 distractor
paragraphs): a one-trial BM25 study, ``composer export --register --promote``, then in fresh processes
with the corpus file moved away (so nothing can re-analyse it) the start from the model URI to the first
answer (``mlflow.pyfunc.load_model`` + ``predict``; ``composer serve models:/...`` to its first /ask)
and ``composer eval`` of ARCD's questions with the exported config on the study's work dir, the whole
command timed.

    .venv/bin/python benchmarks/bench_serve.py --registry 250000 [--arcd examples/arcd]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml
from bench_retrieval import loop_seconds, machine
from bench_scale import ARCD, DEFAULT_CACHE, corpus_file

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
SAMPLE = REPO / "examples" / "arcd-sample"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(source: list[str], port: int, env: dict[str, str] = ENV) -> tuple[subprocess.Popen[bytes], float]:
    """`composer serve SOURCE...`; seconds from launch to its first /ask answer."""
    t = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "composer", "serve", *source, "--port", str(port)],
                              env=env, stderr=subprocess.DEVNULL)
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


PREDICT = """
import sys, time
t = time.perf_counter()
import mlflow.pyfunc
import composer.registered.mlflow_model as composer_model
imported = time.perf_counter() - t
opening = composer_model.open_pipeline
spent = []
def timed_open(artifacts):
    started = time.perf_counter()
    try:
        return opening(artifacts)
    finally:
        spent.append(time.perf_counter() - started)
composer_model.open_pipeline = timed_open
model = mlflow.pyfunc.load_model(sys.argv[1], suppress_warnings=sys.argv[3] == "quiet")
loaded = time.perf_counter() - t - imported
rows = model.predict([sys.argv[2]])
assert rows[0]["hits"], rows
print(f"TIMES {imported:.3f} {loaded:.3f} {spent[0]:.3f} {time.perf_counter() - t - imported - loaded:.3f}")
"""


def timed(args: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    """Seconds ``args`` took, the whole process, and its stdout; it must succeed."""
    t = time.perf_counter()
    out = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(args[:4])} failed: {out.stderr[-2000:]}")
    return time.perf_counter() - t, out.stdout + out.stderr


def registered_model(name: str, corpus: Path, questions: Path, root: Path) -> dict[str, Any]:
    """A one-trial BM25 study on ``corpus``, its winner registered, then loaded and evaluated in fresh
    processes with ``corpus`` moved away."""
    composer = [sys.executable, "-m", "composer"]
    (root / "space.yaml").write_text("dimensions:\n  retrieval.mode: {choices: [bm25]}\n"
                                     "  retrieval.k: {choices: [10]}\n", encoding="utf-8")
    experiment = {"name": name, "corpus": str(corpus), "questions": str(questions),
                  "search_space": "space.yaml", "n_trials": 1, "mlflow": {"traces": 0}}
    (root / "experiment.yaml").write_text(yaml.safe_dump(experiment), encoding="utf-8")
    out: dict[str, Any] = {"corpus": name}
    out["optimize_s"], _ = timed([*composer, "optimize", "experiment.yaml"], ENV, root)
    out["register_s"], log = timed([*composer, "export", name, "-e", "experiment.yaml", "--register", name,
                                    "--promote", "-o", "best.yaml"], ENV, root)
    out["register_log"] = " | ".join(line.strip() for line in log.splitlines() if ":" in line)
    env = {**ENV, "MLFLOW_TRACKING_URI": f"sqlite:///{root / '.composer' / 'mlflow.db'}"}
    away = corpus.with_name(corpus.name + ".away")
    corpus.rename(away)
    elsewhere = Path(tempfile.mkdtemp(prefix="bench-model-"))
    try:
        uri = f"models:/{name}@champion"
        for how in ("default", "quiet"):  # quiet: suppress_warnings, which skips MLflow's package scan
            whole, times = timed([sys.executable, "-c", PREDICT, uri, "من هو جمال خاشقجي؟", how], env,
                                 elsewhere)
            (line,) = [line for line in times.splitlines() if line.startswith("TIMES ")]
            parts = dict(zip(("import", "load_model", "composer_open", "predict"),
                             (float(x) for x in line.split()[1:]), strict=True))
            out[f"uri_to_answer_{how}_s"] = {"whole": round(whole, 2), **parts}
        server, out["serve_to_answer_s"] = start([uri], free_port(), env)
        server.terminate()
        server.wait(30)
        out["eval_s"], _ = timed([*composer, "eval", str(questions), "--config", "best.yaml", "--workdir",
                                  ".composer", "--json"], ENV, root)
    finally:
        away.rename(corpus)
    return out


def registry(sizes: list[int], arcd: Path, cache: Path) -> None:
    """The registered winner on the sample and at each of ``sizes`` (see the module docstring)."""
    corpora = [("sample", SAMPLE / "corpus.jsonl", SAMPLE / "questions.jsonl")]
    corpora += [(f"arcd-{n}", corpus_file(n, cache, arcd), arcd / "questions.jsonl") for n in sizes]
    for name, corpus, questions in corpora:
        with tempfile.TemporaryDirectory(prefix="bench-registry-") as tmp:
            corpus = Path(shutil.copy(corpus, Path(tmp) / corpus.name))  # its own copy, moved away later
            row = registered_model(name, corpus, questions, Path(tmp))
            (model,) = {p.parent for p in Path(tmp, ".composer").rglob("composer.json")}
            row["model_mb"] = sum(f.stat().st_size for f in model.rglob("*") if f.is_file()) / 1e6
            # what makes it up: the saved index (chunks.json, arrays), the packed Edge shard ("edge"), ...
            row["model_parts_mb"] = {
                part.name: round(sum(f.stat().st_size for f in part.rglob("*") if f.is_file()) / 1e6, 1)
                if part.is_dir() else round(part.stat().st_size / 1e6, 3)
                for part in model.iterdir()
            }
        print(json.dumps(row, ensure_ascii=False), flush=True)


def main() -> None:
    from fake_llm_server import FakeLLMServer
    from scripted_llm import ScriptedRAG

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500, help="Requests per concurrency level.")
    parser.add_argument("--llm-latency", type=float, default=0.05, help="Seconds the scripted LLM takes.")
    parser.add_argument("--registry", type=int, nargs="*", metavar="SIZE",
                        help="Measure the registered model instead: the sample and ARCD + SIZE chunks.")
    parser.add_argument("--arcd", type=Path, default=ARCD,
                        help="The ARCD folder (corpus.jsonl, questions.jsonl); default the repository's.")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="Where the large corpora are kept.")
    args = parser.parse_args()
    print(f"machine: {machine()}; 10^7-step Python loop: {loop_seconds():.2f} s")
    if args.registry is not None:
        registry(args.registry, args.arcd, args.cache)
        return
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
            server, start_s = start([str(config), "--corpus", str(SAMPLE / "corpus.jsonl")], port)
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
