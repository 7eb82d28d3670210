"""Kill drill: `composer optimize` on the demo study, killed with SIGKILL at random moments and run again at
once each time, then to its end. Every kill takes the study's process; every other one its MLflow writer
too (a machine-wide crash). At the end it audits the study and prints the figures:

- Optuna: n_trials finished (distinct configurations), 0 lost (every trial cut off by a kill was run
  again and finished), 0 duplicated (no configuration finished twice, repeats answered from an earlier
  trial aside);
- MLflow: one parent run, exactly one run per Optuna trial, its status matching the trial's state;
- the leaderboard (configuration, state, composite) equal to an uninterrupted run with the same seed.

    .venv/bin/python benchmarks/bench_drill.py [--kills 10] [--seed 0] [--trials 30]
                                               [--experiment EXPERIMENT.yaml]

The experiment defaults to experiments/arabic-demo.yaml with n_trials raised to --trials, so the study
outlives its kills. One kill in five comes while the study starts (imports, storage, the MLflow parent),
one in five in the first trial of a start (its index build, its model loading), the others after a later
trial, within two trial times (the uninterrupted run's): in a trial's searches and scoring, or between
trials while the writer logs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from composer.tracking.read import RUN_STATUS

ROOT = Path(__file__).resolve().parents[1]
COMPOSER = str(Path(sys.executable).with_name("composer"))


@dataclass
class Kill:
    after_s: float
    moment: str
    writer_too: bool


@dataclass
class Audit:
    """What the drill checks, as figures."""

    n_trials: int
    finished: int
    lost: list[int] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    retried: int = 0
    optuna_trials: int = 0
    mlflow_parents: int = 0
    mlflow_missing: list[int] = field(default_factory=list)
    mlflow_extra: list[str] = field(default_factory=list)
    mlflow_wrong_status: list[int] = field(default_factory=list)
    leaderboard: list[tuple[Any, ...]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.finished == self.n_trials
            and not self.lost
            and not self.duplicated
            and self.mlflow_parents == 1
            and not (self.mlflow_missing or self.mlflow_extra or self.mlflow_wrong_status)
        )


def experiment_copy(source: Path, workdir: Path, out: Path, n_trials: int | None = None) -> Path:
    """The experiment with absolute data paths, its own workdir and, if given, another n_trials."""
    data = yaml.safe_load(source.read_text(encoding="utf-8"))
    for key in ("corpus", "questions", "search_space"):
        data[key] = str((source.parent / data[key]).resolve())
    data["workdir"] = str(workdir)
    if n_trials is not None:
        data["n_trials"] = n_trials
    out.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return out


def optimize(experiment: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    with log.open("ab") as out:
        return subprocess.Popen([COMPOSER, "optimize", str(experiment)], stdout=out, stderr=out, env=env,
                                cwd=experiment.parent)


def writer_pids(study_pid: int) -> list[int]:
    """The MLflow writer processes the study started (children in their own session)."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
            cmdline = (status.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if fields.get("PPid", "").strip() == str(study_pid) and b"composer.tracking.writer" in cmdline:
            found.append(int(status.parent.name))
    return found


def moment(storage: str, name: str) -> str:
    """What the study was doing when killed: the running trial, as far as Optuna knows."""
    import optuna

    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except Exception:
        return "starting (no study yet)"
    running = [t.number for t in study.get_trials(deepcopy=False) if t.state.name == "RUNNING"]
    done = sum(t.state.name in ("COMPLETE", "PRUNED") for t in study.get_trials(deepcopy=False))
    if running:
        return f"trial #{running[0]} running ({done} finished)"
    return f"between trials ({done} finished)"


STARTED = "trials finished"
"""In the study's first line (``study NAME: N trials finished, M to run``): its stores are open."""


def finished(storage: str, name: str) -> int:
    import optuna

    try:
        trials = optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
    except Exception:  # not created yet
        return 0
    return sum(t.state.name in ("COMPLETE", "PRUNED") for t in trials)


def drill(
    experiment: Path, kills: int, seed: int, *, startup_s: float, first_trial_s: float, trial_s: float,
    log: Path,
) -> list[Kill]:
    """Kill the study ``kills`` times (see the module docstring), rerunning at once; then run it to its
    end. Fewer kills when the study ends first. The moment's delay counts from the start ("starting"),
    from the study being open ("first trial"), or from a trial finishing in this start ("later trial")."""
    exp = yaml.safe_load(experiment.read_text(encoding="utf-8"))
    storage = f"sqlite:///{Path(exp['workdir']) / 'optuna.db'}"
    rng = random.Random(seed)
    done: list[Kill] = []
    while len(done) < kills:
        where = rng.choices(["starting", "first trial", "later trial"], weights=[1, 1, 3])[0]
        offset = log.stat().st_size if log.exists() else 0
        before = finished(storage, exp["name"])
        process = optimize(experiment, log)
        delay = {"starting": rng.uniform(0.5, startup_s), "first trial": rng.uniform(0.0, first_trial_s),
                 "later trial": rng.uniform(0.0, 2 * trial_s)}[where]
        while process.poll() is None and not (
            where == "starting"
            or (where == "first trial" and STARTED in _since(log, offset))
            or (where == "later trial" and finished(storage, exp["name"]) > before)
        ):
            time.sleep(0.05)
        started = time.monotonic()
        while process.poll() is None and time.monotonic() - started < delay:
            time.sleep(0.02)
        if process.poll() is not None:  # it finished before the kill: nothing was cut off
            if process.returncode != 0:
                raise SystemExit(f"the study failed (exit {process.returncode}); see {log}")
            return done
        writer_too = len(done) % 2 == 1
        victims = writer_pids(process.pid) if writer_too else []
        os.kill(process.pid, signal.SIGKILL)
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):  # it may have ended with the study
                os.kill(pid, signal.SIGKILL)
        process.wait()
        done.append(Kill(time.monotonic() - started, f"{where}: {moment(storage, exp['name'])}", writer_too))
    final = optimize(experiment, log)
    if final.wait() != 0:
        raise SystemExit(f"the final run failed (exit {final.returncode}); see {log}")
    return done


def _since(log: Path, offset: int) -> str:
    with log.open("rb") as f:
        f.seek(offset)
        return f.read().decode("utf-8", "replace")


def audit(experiment: Path) -> Audit:
    """Optuna and MLflow as they are after the drill (see the module docstring)."""
    import optuna
    from mlflow import MlflowClient

    from composer.record import TrialRecord
    from composer.study.experiment import load_experiment
    from composer.study.fate import failure_of

    exp = load_experiment(experiment)
    study = optuna.load_study(study_name=exp.name, storage=exp.storage_url)
    trials = study.get_trials(deepcopy=False)
    assert exp.n_trials is not None
    out = Audit(exp.n_trials, 0, optuna_trials=len(trials))
    finished_configs: Counter[str] = Counter()
    for t in trials:
        record = TrialRecord.of(t)
        if t.state.name in ("COMPLETE", "PRUNED") and record is not None and record.duplicate_of is None:
            out.finished += 1
            finished_configs[record.config_hash] += 1
    states = {t.number: t.state.name for t in trials}
    ran = {_params(t) for t in trials if t.state.name in ("COMPLETE", "PRUNED")}
    # Lost: cut off once it had its configuration, which never finished since (by a retry, or proposed
    # anew). One cut off while its parameters were drawn is drawn anew, whole, by the next trial.
    out.lost = [
        t.number
        for t in trials
        if failure_of(t) == "lost" and TrialRecord.of(t) is not None and _params(t) not in ran
    ]
    out.retried = sum(failure_of(t) == "lost" for t in trials)
    out.duplicated = [h for h, n in finished_configs.items() if n > 1]
    out.leaderboard = leaderboard_rows(trials)

    client = MlflowClient(exp.tracking_uri)
    found = client.get_experiment_by_name(exp.mlflow_experiment)
    assert found is not None, "the study logged nothing to MLflow"
    experiment_id = found.experiment_id
    parents = client.search_runs(
        [experiment_id], f"tags.`composer.study` = '{exp.name}' and tags.`composer.role` = 'study'"
    )
    out.mlflow_parents = len(parents)
    runs = client.search_runs([experiment_id], "tags.`composer.role` = 'trial'", max_results=50000)
    by_number: dict[int, list[Any]] = {}
    for run in runs:
        by_number.setdefault(int(run.data.tags["composer.trial"]), []).append(run)
    for number, state in states.items():
        runs_of = by_number.get(number, [])
        if state == "WAITING":
            continue
        if not runs_of:
            out.mlflow_missing.append(number)
        elif len(runs_of) > 1:
            out.mlflow_extra.append(f"#{number} x{len(runs_of)}")
        elif runs_of[0].info.status != RUN_STATUS.get(state):
            out.mlflow_wrong_status.append(number)
    out.mlflow_extra += [f"#{n} (no such trial)" for n in by_number if n not in states]
    return out


def _params(trial: Any) -> str:
    return repr(sorted(trial.params.items()))


def leaderboard_rows(trials: list[Any]) -> list[tuple[Any, ...]]:
    """(state, composite, configuration) of every finished trial, repeats included: trial numbers differ
    between a drilled study and an uninterrupted one (a retry takes a new number), nothing else may."""
    from composer.record import TrialRecord

    rows = []
    for t in trials:
        record = TrialRecord.of(t)
        if t.state.name in ("COMPLETE", "PRUNED") and record is not None:
            value = record.metrics.get("composite", record.metrics.get("composite_at_prune"))
            rows.append((t.state.name, value, record.config_hash, record.duplicate_of is not None))
    return sorted(rows, key=lambda r: (r[0], -(r[1] or 0.0), r[2], r[3]))


@dataclass
class Reference:
    """The uninterrupted run: its leaderboard, wall time, start-up time and mean trial time."""

    leaderboard: list[tuple[Any, ...]]
    seconds: float
    startup_s: float
    first_trial_s: float
    trial_s: float


def reference(source: Path, root: Path, n_trials: int) -> Reference:
    import optuna

    from composer.study.experiment import load_experiment

    experiment = experiment_copy(source, root / "reference-work", root / "reference.yaml", n_trials)
    started, wall = time.monotonic(), time.time()
    if optimize(experiment, root / "reference.log").wait() != 0:
        raise SystemExit(f"the reference run failed; see {root / 'reference.log'}")
    seconds = time.monotonic() - started
    exp = load_experiment(experiment)
    trials = optuna.load_study(study_name=exp.name, storage=exp.storage_url).get_trials(deepcopy=False)
    starts = [t.datetime_start.timestamp() for t in trials if t.datetime_start is not None]
    ends = [t.datetime_complete.timestamp() for t in trials if t.datetime_complete is not None]
    first = min(trials, key=lambda t: t.number)
    assert first.datetime_start is not None and first.datetime_complete is not None
    return Reference(
        leaderboard_rows(trials),
        seconds,
        startup_s=min(starts) - wall,
        first_trial_s=(first.datetime_complete - first.datetime_start).total_seconds(),
        trial_s=(max(ends) - min(starts)) / len(trials),
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--experiment", type=Path, default=ROOT / "experiments" / "arabic-demo.yaml")
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--keep", type=Path, help="Work in this folder and keep it (default: a temp one).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="composer-drill-") as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        ref = reference(args.experiment, root, args.trials)
        board = ref.leaderboard
        print(f"uninterrupted run: {ref.seconds:.1f} s, {len(board)} finished trials (start-up "
              f"{ref.startup_s:.1f} s, first trial {ref.first_trial_s:.1f} s, {ref.trial_s:.2f} s per trial)")
        experiment = experiment_copy(args.experiment, root / "drill-work", root / "drill.yaml", args.trials)
        started = time.monotonic()
        kills = drill(experiment, args.kills, args.seed, startup_s=ref.startup_s,
                      first_trial_s=ref.first_trial_s, trial_s=ref.trial_s, log=root / "drill.log")
        drilled = time.monotonic() - started
        for i, kill in enumerate(kills, 1):
            who = "study + MLflow writer" if kill.writer_too else "study"
            print(f"kill {i:2d}: after {kill.after_s:4.1f} s, {kill.moment}; killed: {who}")
        result = audit(experiment)
        print(f"drilled run: {drilled:.1f} s over {len(kills) + 1} starts, {result.optuna_trials} Optuna "
              f"trials ({result.retried} cut off and run again)")
        print(f"finished: {result.finished} of n_trials {result.n_trials}; lost: {len(result.lost)} "
              f"{result.lost or ''}; duplicated: {len(result.duplicated)}")
        print(f"MLflow: {result.mlflow_parents} parent run; trials without a run: {result.mlflow_missing}; "
              f"runs twice: {result.mlflow_extra}; status not matching Optuna: {result.mlflow_wrong_status}")
        same = result.leaderboard == board
        print(f"leaderboard equal to the uninterrupted run: {'yes' if same else 'NO'}")
        if not same:
            for row in sorted(set(board) ^ set(result.leaderboard)):
                print("  differs:", row)
        if not (result.ok and same):
            raise SystemExit(1)


if __name__ == "__main__":
    main()
