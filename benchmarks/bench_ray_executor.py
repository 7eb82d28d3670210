"""The per-trial overhead of the Ray executor against one process, on AutoRAG's space.

The same trials of search_spaces/autorag-arcd.yaml (a grid: BM25, MiniLM dense, hybrid RRF and convex
fusion; the first ``--trials`` points) on ARCD's first ``--questions`` questions, run by `composer
optimize` three ways, each a new study in one shared work dir whose caches and indexes a first, untimed
run has filled (every mode finds the vectors encoded and the indexes built, so what differs is how the
trials are run, not what they compute): one process; `--ray local --workers 1`; `--ray local --workers 2`.

Printed per mode: wall seconds, split into the start (the command's start to its first trial's start:
Ray's start, the workers' imports and data loading, paid once per study), the trials (first trial's start
to the last one's end) and the end (the summary, the MLflow writers' last records, Ray's shutdown); the
seconds per trial over the trials' span, and its overhead against one process's; the median trial
inside its worker. On a machine with more cores than workers, 2 workers should take about half of one's
seconds per trial; here (2 cores, shared by the driver, Ray's own processes and the MLflow writers) they
cannot.

    .venv/bin/python benchmarks/bench_ray_executor.py [--data examples/arcd] [--trials 40] [--questions 300]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
MODES = {"one process": [], "Ray, 1 worker": ["--ray", "local", "--workers", "1"],
         "Ray, 2 workers": ["--ray", "local", "--workers", "2"]}


def experiment(tmp: Path, data: Path, trials: int, questions: int) -> Path:
    """AutoRAG's space on ARCD's first ``questions`` questions, ``trials`` grid points, every question
    scored in every trial (no pruning), in the work dir ``tmp/work``."""
    subset = tmp / "questions.jsonl"
    with (data / "questions.jsonl").open(encoding="utf-8") as lines:
        subset.write_text("".join(line for _, line in zip(range(questions), lines, strict=False)),
                          encoding="utf-8")
    path = tmp / "autorag-ray.yaml"
    path.write_text(yaml.safe_dump({
        "name": "warm", "corpus": str((data / "corpus.jsonl").resolve()), "questions": str(subset),
        "search_space": str(ROOT / "search_spaces" / "autorag-arcd.yaml"),
        "objective": {"k": 10, "metrics": {"recall": 1, "ndcg": 1}}, "sampler": {"name": "grid", "seed": 0},
        "pruner": "none", "n_trials": trials, "workdir": str(tmp / "work"), "mlflow": {"traces": 0},
    }), encoding="utf-8")
    return path


def run(path: Path, study: str, args: list[str]) -> float:
    """`composer optimize` as study ``study``: its wall seconds (a failure ends the benchmark)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    command = [sys.executable, "-m", "composer", "optimize", str(path), "--study-name", study, *args]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=path.parent, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"composer optimize {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return wall


def figures(storage: str, study: str, started_at: float) -> tuple[float, float, float, int, int]:
    """(start: command start to first trial start; span: first trial start to last trial end; median
    trial seconds; trials finished; workers that ran them)."""
    import optuna

    trials = [t for t in optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)
              if t.state.is_finished() and t.datetime_start is not None and t.datetime_complete is not None]
    first = min(t.datetime_start.timestamp() for t in trials if t.datetime_start is not None)
    last = max(t.datetime_complete.timestamp() for t in trials if t.datetime_complete is not None)
    median = statistics.median(t.duration.total_seconds() for t in trials if t.duration is not None)
    workers = {t.system_attrs.get("composer.worker") for t in trials}
    return first - started_at, last - first, median, len(trials), len(workers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=ROOT / "examples" / "arcd")
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--questions", type=int, default=300)
    args = parser.parse_args()
    os.environ.update({"MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_LOGGING_LEVEL": "WARNING"})
    with tempfile.TemporaryDirectory(prefix="composer-bench-ray-") as tmp:
        path = experiment(Path(tmp), args.data, args.trials, args.questions)
        storage = f"sqlite:///{Path(tmp) / 'work' / 'optuna.db'}"
        warm = run(path, "warm", [])
        print(f"AutoRAG's space, {args.trials} grid trials, {args.questions} ARCD questions, "
              f"{os.cpu_count()} cores; the untimed first run (encoding, index builds) took {warm:.1f} s")
        print(f"{'mode':<16} {'wall s':>7} {'start s':>8} {'trials s':>9} {'end s':>6} {'s/trial':>8} "
              f"{'overhead/trial s':>17} {'trial s (median)':>17} workers")
        base: float | None = None
        for mode, extra in MODES.items():
            study = mode.replace(" ", "-").replace(",", "")
            started_at = time.time()
            wall = run(path, study, extra)
            start, span, median, n, workers = figures(storage, study, started_at)
            per_trial = span / n
            base = per_trial if base is None else base
            end = wall - start - span
            print(f"{mode:<16} {wall:7.1f} {start:8.1f} {span:9.1f} {end:6.1f} {per_trial:8.3f} "
                  f"{per_trial - base:+17.3f} {median:17.3f} {workers}")

if __name__ == "__main__":
    main()
