"""A whole retrieval study on ARCD, timed end to end, beside AutoRAG's figures on the same task.

The task is DESIGN.md's "peer to beat": all 1,395 ARCD questions, retrieval only, offline. AutoRAG 0.3.27
(BM25 with its three tokenizers + Chroma/all-MiniLM-L6-v2 + hybrid RRF/CC weight sweeps) took 31 min 38 s
wall and 1.51 GB peak on this machine and reached recall@10 0.832, nDCG@10 0.679. Here the objective is
recall@10 + nDCG@10 only (no answer metrics), the space is search_spaces/arabic-offline.yaml, and the
study starts from an empty work dir, so every encode is paid (embedding cache cold).

    .venv/bin/python benchmarks/bench_study.py [--data ../shared/data/arcd] [--trials 30]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
AUTORAG = {"wall_s": 31 * 60 + 38, "peak_gb": 1.51, "recall@10": 0.832, "ndcg@10": 0.679}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "arcd")
    parser.add_argument("--trials", type=int, default=30)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="composer-bench-study-") as tmp:
        work = Path(tmp)
        experiment = work / "arcd-retrieval.yaml"
        experiment.write_text(
            yaml.safe_dump(
                {
                    "name": "arcd-retrieval",
                    "corpus": str((args.data / "corpus.jsonl").resolve()),
                    "questions": str((args.data / "questions.jsonl").resolve()),
                    "search_space": str(ROOT / "search_spaces" / "arabic-offline.yaml"),
                    "objective": {"k": 10, "metrics": {"recall": 1, "ndcg": 1}},
                    "sampler": {"name": "tpe", "seed": 0, "n_startup_trials": 8},
                    "pruner": "median",
                    "n_trials": args.trials,
                    "batch_size": 350,
                    "workdir": str(work / ".composer"),
                    "mlflow": {"traces": 5},
                }
            ),
            encoding="utf-8",
        )
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        composer = str(Path(sys.executable).with_name("composer"))
        started = time.perf_counter()
        subprocess.run([composer, "optimize", str(experiment)], check=True, env=env, cwd=work)
        wall = time.perf_counter() - started
        peak_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024**2  # KiB on Linux

        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.load_study(
            study_name="arcd-retrieval", storage=f"sqlite:///{work / '.composer' / 'optuna.db'}"
        )
        best = study.best_trial
        metrics = best.user_attrs["metrics"]
        states = [t.state.name for t in study.trials]
        from composer.study.study import encode_summary

        encodes = encode_summary(study)

    rows = [
        ("wall time", f"{wall / 60:.1f} min", f"{AUTORAG['wall_s'] / 60:.1f} min", AUTORAG["wall_s"] / wall),
        ("peak memory", f"{peak_gb:.2f} GB", f"{AUTORAG['peak_gb']:.2f} GB", AUTORAG["peak_gb"] / peak_gb),
        ("best recall@10", f"{metrics['recall@10']:.3f}", f"{AUTORAG['recall@10']:.3f}", None),
        ("best nDCG@10", f"{metrics['ndcg@10']:.3f}", f"{AUTORAG['ndcg@10']:.3f}", None),
    ]
    print(
        f"\n{len(states)} trials: {states.count('COMPLETE')} complete, {states.count('PRUNED')} pruned; "
        f"index builds/encodes: {encodes}"
    )
    print(f"best trial #{best.number}: {best.user_attrs['config']}")
    print("\n| | Composer | AutoRAG 0.3.27 | AutoRAG / Composer |\n|---|---|---|---|")
    for name, ours, theirs, ratio in rows:
        print(f"| {name} | {ours} | {theirs} | {'' if ratio is None else f'{ratio:.1f}x'} |")


if __name__ == "__main__":
    main()
