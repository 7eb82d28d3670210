"""AutoRAG's whole retrieval space on ARCD, as one Composer study: wall time, peak memory, per-trial split.

The work is the one AutoRAG 0.3.27 did on a 2-core Intel Xeon (its figures below, measured once, same data):
every one of ARCD's 1,395 questions retrieved and scored (recall, nDCG at 10) for BM25, dense retrieval with
all-MiniLM-L6-v2, hybrid RRF with rrf_k 4..80 and convex combination with 4 normalizations x 101 weights.
Composer runs search_spaces/autorag-arcd.yaml as a grid (484 trials: its BM25 comes with and without
stemming, where AutoRAG tried 3 tokenizers) with `composer optimize`, default settings, from a cold work dir
(every encode paid), one process plus its MLflow writer. Printed: wall, peak memory (the study's process
and its writer, RSS and PSS summed over the tree, RSS sampled every 0.1 s, PSS every 1 s), trials, encode
passes, best nDCG@10, and where a trial's time goes (from each trial's record; "other" is Optuna, records
and handing the log to the writer, waiting for it included when it is behind).

The MLflow writer's cost is printed twice: in the study (sharing the two cores with it, MLflow traces
included), and replayed after it on the idle machine: 60 of the study's trial records, kept as it spooled
them, written again by the writer's code and, interleaved, by MLflow's own calls for the same runs (create,
log_batch, log_artifacts of the files, terminate), the equal work the writer is measured against.

A ratio against AutoRAG holds only when both ran on the same machine: give AutoRAG's wall and peak there
(`--autorag-wall`, `--autorag-peak-gb`). Without them the figures below are compared, the ratio is
labelled an estimate, and the machine's 10^7-step Python loop time is printed so a reader can scale it.

    .venv/bin/python benchmarks/bench_autorag_space.py [--data examples/arcd] [--workdir DIR] [--trials N]
        [--autorag-wall SECONDS --autorag-peak-gb GB]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from bench_retrieval import loop_seconds, machine

if TYPE_CHECKING:
    from mlflow import MlflowClient

ROOT = Path(__file__).resolve().parents[1]
# AutoRAG 0.3.27 on ARCD, all 1,395 questions, on a 2-core Intel Xeon: 485 configurations evaluated in
# 1,898 s (31 min 38 s) wall, 1.51 GB peak RSS; its best: recall@10 0.832, nDCG@10 0.679, MRR@10 0.630.
AUTORAG = {"configurations": 485, "wall_s": 1898.0, "peak_gb": 1.51, "ndcg@10": 0.679, "recall@10": 0.832}


PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


def tree_memory_kib(root_pid: int, *, pss: bool = True) -> tuple[int, int, int]:
    """Memory of ``root_pid`` and all its descendants (KiB): summed RSS, summed PSS (0 unless ``pss``)
    and the largest RSS.

    RSS counts a page shared by two processes (the interpreter, numpy, pandas: loaded by both the study and
    its writer) in each; PSS splits it between them, so the PSS sum is what the tree takes from the
    machine. PSS costs the kernel a walk of every page table (~8 ms for a 1 GB process, which a sampler
    at 10 Hz takes from a 2-core machine's study), RSS (``statm``) ~0.05 ms."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, frontier = {root_pid}, [root_pid]
    while frontier:
        pid = frontier.pop()
        for child, parent in parents.items():
            if parent == pid and child not in tree:
                tree.add(child)
                frontier.append(child)
    rss, shares = {}, {}
    for pid in tree:
        try:
            rss[pid] = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_KIB
            if pss:
                for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                    name, _, value = line.partition(":")
                    if name == "Pss":
                        shares[pid] = int(value.split()[0])
        except (OSError, IndexError, ValueError):
            continue
    return sum(rss.values()), sum(shares.values()), max(rss.values(), default=0)


def run_optimize(experiment: Path, cwd: Path, spool: Path, kept: Path) -> tuple[float, tuple[int, int, int]]:
    """Run ``composer optimize experiment`` offline in ``cwd``: its wall seconds and the peaks of
    ``tree_memory_kib`` over the run, sampled every 0.1 s (PSS every 1 s), keeping trial records from
    ``spool`` in ``kept`` meanwhile (``keep_records``). A failed study ends the benchmark."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    command = [str(Path(sys.executable).with_name("composer")), "optimize", str(experiment)]
    # stderr to a file, not a pipe nobody reads while the study runs: a full pipe would block the study.
    with tempfile.TemporaryFile("w+", encoding="utf-8") as errors:
        started = time.perf_counter()
        process = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=errors)
        rss, pss, largest, samples = 0, 0, 0, 0
        while process.poll() is None:
            now = tree_memory_kib(process.pid, pss=samples % 10 == 0)  # PSS once a second: see above
            samples += 1
            rss, pss, largest = max(rss, now[0]), max(pss, now[1]), max(largest, now[2])
            keep_records(spool, kept)
            time.sleep(0.1)
        wall = time.perf_counter() - started
        if process.returncode != 0:
            errors.seek(0)
            sys.exit(f"composer optimize failed ({process.returncode}):\n{errors.read()[-4000:]}")
    return wall, (rss, pss, largest)


KEPT = 60
"""Trial records kept to replay after the study."""


def keep_records(spool: Path, kept: Path) -> None:
    """Hard links to the trial records the study spools (its writer deletes each once written), up to
    ``KEPT``, and to the artifacts files the runner spooled with them (in ``kept/artifacts``): what
    ``replay`` writes again."""
    from composer.tracking.spool import ARTIFACTS, RECORD, TABLES, UNTRACED

    if not spool.is_dir() or len(os.listdir(kept)) > KEPT:
        return
    (kept / ARTIFACTS).mkdir(exist_ok=True)
    for path in spool.glob(f"*/*{RECORD}"):
        folder = path.parent.name
        if folder == ARTIFACTS:
            target = kept / ARTIFACTS / path.name
        elif folder not in (TABLES, UNTRACED) and path.name.endswith(f"-trial{RECORD}"):
            target = kept / f"{folder}-{path.name}"
        else:
            continue
        if not target.exists():
            with contextlib.suppress(OSError):  # written and removed meanwhile
                os.link(path, target)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=ROOT / "examples" / "arcd")
    parser.add_argument("--workdir", type=Path, default=None, help="default: a new, empty one (cold)")
    parser.add_argument("--trials", type=int, default=484)
    parser.add_argument("--autorag-wall", type=float, default=None,
                        help="AutoRAG's wall seconds for its 485 configurations, measured on this machine")
    parser.add_argument("--autorag-peak-gb", type=float, default=None, help="and its peak RSS (GB)")
    args = parser.parse_args()
    # As in the writer: no usage telemetry (network, work on every call), no notes on creating a store.
    os.environ.update({"MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_LOGGING_LEVEL": "WARNING"})
    if not (args.data / "corpus.jsonl").is_file():
        sys.exit(f"no corpus.jsonl in {args.data}")

    with tempfile.TemporaryDirectory(prefix="composer-bench-autorag-") as tmp:
        work = (args.workdir or Path(tmp) / "work").resolve()
        experiment = Path(tmp) / "autorag-arcd.yaml"
        experiment.write_text(
            yaml.safe_dump(
                {
                    "name": "autorag-arcd",
                    "corpus": str((args.data / "corpus.jsonl").resolve()),
                    "questions": str((args.data / "questions.jsonl").resolve()),
                    "search_space": str(ROOT / "search_spaces" / "autorag-arcd.yaml"),
                    "objective": {"k": 10, "metrics": {"recall": 1, "ndcg": 1}},
                    "sampler": {"name": "grid", "seed": None},
                    "pruner": "none",  # every question scored in every trial, as AutoRAG did
                    "n_trials": args.trials,
                    "workdir": str(work),
                }
            ),
            encoding="utf-8",
        )
        print(f"machine: {machine()}; 10^7-step Python loop: {loop_seconds():.2f} s")
        kept = work / "bench-kept"
        kept.mkdir(parents=True, exist_ok=True)
        spool = work / "spool" / "autorag-arcd"
        wall, (peak, peak_pss, peak_each) = run_optimize(experiment, Path(tmp), spool, kept)
        here = args.autorag_wall is not None
        peer = {**AUTORAG, **({"wall_s": args.autorag_wall} if here else {}),
                **({"peak_gb": args.autorag_peak_gb} if args.autorag_peak_gb is not None else {})}
        report(work, wall, peak / 1024**2, peak_pss / 1024**2, peak_each / 1024**2, peer, same_machine=here)
        print_replay(kept, spool / "tables", args.data / "questions.jsonl")


def report(
    work: Path,
    wall: float,
    peak_gb: float,
    peak_pss_gb: float,
    peak_one_gb: float,
    peer: dict[str, float],
    *,
    same_machine: bool,
) -> None:
    """Print the study's figures and their ratios to ``peer``'s (AutoRAG's), an estimate unless
    ``same_machine``."""
    import optuna
    from mlflow import MlflowClient

    from composer.record import TrialRecord
    from composer.study.finish import encode_summary

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name="autorag-arcd", storage=f"sqlite:///{work / 'optuna.db'}")
    trials = study.trials
    records = [(t, r) for t in trials if (r := TrialRecord.of(t)) is not None and r.composite is not None]
    best = max(records, key=lambda tr: tr[1].metrics["ndcg@10"])
    encode = encode_summary(trials)
    split: dict[str, float] = {}
    for _, record in records:
        for stage, seconds in record.seconds.items():
            split[stage] = split.get(stage, 0.0) + seconds
    trial_wall = sum(
        (t.datetime_complete - t.datetime_start).total_seconds()
        for t, _ in records
        if t.datetime_complete and t.datetime_start
    )
    split["other"] = trial_wall - sum(split.values())
    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("autorag-arcd")
    assert experiment is not None
    [parent] = client.search_runs([experiment.experiment_id], filter_string="tags.`composer.role` = 'study'")
    runs = client.search_runs(
        [experiment.experiment_id], filter_string="tags.`composer.role` = 'trial'", max_results=5000
    )
    writer = parent.data.metrics

    n = len(trials)
    print(
        f"\n{n} trials ({sum(t.state.name == 'COMPLETE' for t in trials)} complete), "
        f"{len(runs)} MLflow trial runs; encode passes {encode.encode_passes} "
        f"({encode.embeddings_computed} texts encoded), index builds {encode.index_builds}"
    )
    print(
        f"best nDCG@10 {best[1].metrics['ndcg@10']:.3f} (recall@10 {best[1].metrics['recall@10']:.3f}): "
        f"trial #{best[0].number} {best[0].params}"
    )
    print(
        f"wall {wall:.1f} s; peak memory of the study and its MLflow writer: RSS {peak_gb:.2f} GB summed "
        f"(shared pages counted in each), PSS {peak_pss_gb:.2f} GB; largest process RSS {peak_one_gb:.2f} GB"
    )
    print(
        f"MLflow writer (its own process, off the trials' path): {writer.get('mlflow_writer_records', 0):.0f}"
        f" records in {writer.get('mlflow_writer_seconds', 0):.1f} s; MLflow traces skipped for "
        f"{writer.get('mlflow_traces_skipped', 0):.0f} trials while it was behind"
    )
    written = writer.get("mlflow_writer_records", 0) or 1
    traces_s = writer.get("mlflow_trace_seconds", 0)
    per_record = 1000 * writer.get("mlflow_writer_seconds", 0) / written
    print(
        f"of which MLflow traces for {writer.get('mlflow_traced_trials', 0):.0f} trials (the winner's and "
        f"runner-up's after the study, and those the writer kept pace with): {traces_s:.1f} s; a record "
        f"{per_record:.1f} ms, {per_record - 1000 * traces_s / written:.1f} ms without the traces (sharing "
        f"the machine with the study)"
    )
    print("\nper-trial time split (mean over complete trials, ms):")
    print("| " + " | ".join(split) + " | trial |")
    print("|" + "---|" * (len(split) + 1))
    print(
        "| "
        + " | ".join(f"{1000 * v / len(records):.1f}" for v in split.values())
        + f" | {1000 * trial_wall / len(records):.1f} |"
    )
    ours_per = wall / n
    theirs_per = peer["wall_s"] / peer["configurations"]
    where = ("both on this machine" if same_machine else
             "an estimate: AutoRAG's figures are from another 2-core machine, see the loop time above")
    print(f"\n| | Composer | AutoRAG 0.3.27 | ratio ({where}) |\n|---|---|---|---|")
    print(f"| configurations | {n} | {peer['configurations']:.0f} | |")
    # The whole-study ratio only where the work is AutoRAG's: the full grid, not a --trials sample of it.
    full = n >= peer["configurations"] - 1
    whole = ratio(peer["wall_s"], wall) if full else "(not the same work)"
    print(f"| wall | {wall:.0f} s | {peer['wall_s']:.0f} s | {whole} |")
    print(f"| wall per configuration | {ours_per:.2f} s | {theirs_per:.2f} s | "
          f"{ratio(theirs_per, ours_per)} |")
    print(f"| peak RSS | {peak_gb:.2f} GB | {peer['peak_gb']:.2f} GB | "
          f"{ratio(peer['peak_gb'], peak_gb)} |")
    print(f"| best nDCG@10 | {best[1].metrics['ndcg@10']:.3f} | {peer['ndcg@10']:.3f} | |")
    print(f"| best recall@10 | {best[1].metrics['recall@10']:.3f} | {peer['recall@10']:.3f} | |")


def print_replay(kept: Path, tables: Path, questions: Path) -> None:
    """Print what ``replay`` measures: the writer against MLflow's own calls, equal work."""
    ours, theirs, n = replay(kept, tables, questions)
    print(
        f"\nreplayed on the idle machine, back to back, {n} of the study's trial records: the writer "
        f"{ours:.1f} ms a record (read it, build its files, write its run; no MLflow traces, as most trials "
        f"had none), MLflow's own calls for the same run (create, log_batch, log_artifacts of its files, "
        f"terminate) {theirs:.1f} ms: {ours / theirs:.2f}x (medians)"
    )


def replay(kept: Path, tables: Path, questions: Path) -> tuple[float, float, int]:
    """Write each kept record again with the writer's code (``RunWriter``, read included) into a new store,
    then the run it made with MLflow's own calls into another, interleaved: the medians (ms) and how many.
    Both stores are SQLite in WAL mode, as the writer's."""
    import json

    from mlflow import MlflowClient

    from composer.store import use_wal
    from composer.tracking.spool import ARTIFACTS, artifacts_file, read_record
    from composer.tracking.trial_run import RunWriter

    rows = [json.loads(line) for line in questions.read_text(encoding="utf-8").splitlines() if line.strip()]
    expectations = {
        q["id"]: {"expected_ids": q.get("relevant_ids", []), "expected_response": q.get("reference_answer")}
        for q in rows
    }
    paths = sorted(p for p in kept.iterdir() if p.name != ARTIFACTS)
    trials = [read_record(path, tables, {}) for path in paths]  # those kept with their artifacts file
    paths = [p for p, trial in zip(paths, trials, strict=True) if artifacts_file(kept, trial.number).exists()]
    with tempfile.TemporaryDirectory(prefix="composer-bench-replay-") as tmp:
        root = Path(tmp)
        writer = RunWriter(f"sqlite:///{root / 'writer.db'}", "replay", "replay",
                           storage=f"sqlite:///{root / 'optuna.db'}", artifact_root=root / "writer",
                           expectations=expectations)
        use_wal(root / "floor.db")
        floor = MlflowClient(f"sqlite:///{root / 'floor.db'}")
        experiment = floor.create_experiment("floor", artifact_location=(root / "floor").as_uri())
        cache: dict[str, Any] = {}
        ours, theirs = [], []
        for path in paths:
            started = time.perf_counter()
            trial = read_record(path, tables, cache)
            artifacts = read_record(artifacts_file(kept, trial.number), tables, cache)
            run_id = writer.write_trial(trial, artifacts, traces=False)
            ours.append(time.perf_counter() - started)
            theirs.append(mlflow_calls(writer.client, run_id, floor, experiment))
    return 1000 * statistics.median(ours), 1000 * statistics.median(theirs), len(paths)


def mlflow_calls(source: MlflowClient, run_id: str, floor: MlflowClient, experiment: str) -> float:
    """Seconds MLflow's own calls take to record run ``run_id`` of ``source`` again in ``floor``: create it
    with its tags, log_batch its metrics (every step) and params, log_artifacts its files, terminate it."""
    from mlflow.entities import Metric, Param

    run = source.get_run(run_id)
    folder = source.download_artifacts(run_id, "")
    metrics = [
        Metric(m.key, m.value, m.timestamp, m.step)
        for key in run.data.metrics
        for m in source.get_metric_history(run_id, key)
    ]
    params = [Param(k, v) for k, v in run.data.params.items()]
    tags = {k: v for k, v in run.data.tags.items() if k != "mlflow.runName"}
    started = time.perf_counter()
    made = floor.create_run(experiment, run_name=run.info.run_name, tags=tags)
    floor.log_batch(made.info.run_id, metrics=metrics, params=params)
    floor.log_artifacts(made.info.run_id, folder)
    floor.set_terminated(made.info.run_id)
    return time.perf_counter() - started


def ratio(theirs: float, ours: float) -> str:
    """``theirs`` against ``ours`` as "N.Nx less" (ours smaller) or "N.Nx more"."""
    return f"{theirs / ours:.1f}x less" if ours <= theirs else f"{ours / theirs:.1f}x more"


if __name__ == "__main__":
    main()
