"""Several `composer optimize` workers on one PostgreSQL-backed study, started at the same moment.

First on one machine sharing a workdir (Qdrant Edge indexes, a local MLflow store), then as if on two
machines: separate workdirs and an MLflow tracking server. Either way the study ends with exactly
n_trials finished trials, each number once, run by both workers, one MLflow parent run and one nested
run per trial. Needs PostgreSQL's server binaries (Debian's postgresql package; `.ci/run` installs it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from postgres import Postgres, postgres_bin, running_postgres
from sample_study import write_experiment

from composer.record import TrialRecord
from composer.study._optimize import REPEAT_ALLOWANCE
from composer.study._workers import WORKER_ATTR
from composer.tracking.read import ROLE_TAG, RUN_STATUS, STATE_TAG, STUDY_TAG, TRIAL_TAG

pytestmark = pytest.mark.slow  # a PostgreSQL server and two worker processes per test


def record(t: optuna.trial.FrozenTrial) -> TrialRecord:
    found = TrialRecord.of(t)
    assert found is not None, t.number
    return found

N_TRIALS = 10
DIMS = {
    "retrieval.mode": {"choices": ["bm25"]},
    "retrieval.stem": {"choices": [True, False]},
    "chunking.method": {"choices": ["paragraph", "sentence", "fixed_chars"]},
    "chunking.size": {"type": "int", "low": 300, "high": 600, "step": 300,
                      "when": {"chunking.method": "fixed_chars"}},
    "retrieval.k": {"choices": [3, 5, 10]},
}


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    bin_dir = postgres_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries not installed (/usr/lib/postgresql/*/bin): "
                    "apt-get install postgresql, as .ci/run does")
    with running_postgres(bin_dir) as pg:
        yield pg


def workers_study(root: Path, tracking_uri: str | None = None) -> Path:
    tracking = {"tracking_uri": tracking_uri} if tracking_uri else {}
    return write_experiment(
        root, dims=DIMS, n_questions=45, name="workers", objective={"k": 5},
        sampler={"name": "tpe", "seed": 0, "n_startup_trials": 4},
        pruner={"name": "median", "n_startup_trials": 2, "n_warmup_steps": 0}, n_trials=N_TRIALS,
        batch_size=15, mlflow={"traces": 2, **tracking})


def run_workers(exp: Path, storage: str, workdirs: list[Path]) -> float:
    """Start one `composer optimize` per folder (its cwd, with --workdir <folder>/.composer) at once."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    started = time.monotonic()
    procs = [
        subprocess.Popen([sys.executable, "-m", "composer", "optimize", str(exp), "--storage", storage,
                          "--workdir", str(cwd / ".composer")],
                         cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for cwd in workdirs
    ]
    outputs = [p.communicate(timeout=900) for p in procs]
    seconds = time.monotonic() - started
    for p, (out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, f"worker failed ({p.returncode}):\n{out}\n{err[-4000:]}"
    return seconds


def check_study(storage: str, tracking_uri: str) -> list[optuna.trial.FrozenTrial]:
    """Exactly N_TRIALS finished distinct configurations (repeats answered from earlier trials do not use
    up a slot), trials numbered once each, shared by both workers; MLflow mirrors it."""
    from mlflow import MlflowClient
    from mlflow.entities import ViewType

    study = optuna.load_study(study_name="workers", storage=storage)
    trials = study.get_trials(deepcopy=False)
    finished = [t for t in trials if t.state in (optuna.trial.TrialState.COMPLETE,
                                                 optuna.trial.TrialState.PRUNED)]
    distinct = [t for t in finished if record(t).duplicate_of is None]
    # Two workers that drew one configuration at once: the later waits and repeats the earlier, or, in the
    # milliseconds before the earlier's configuration is on it, runs it too (both complete: one slot).
    slots = {record(t).config_hash if t.state == optuna.trial.TrialState.COMPLETE else t.number
             for t in distinct}
    seen = [(t.number, t.state.name, record(t).config_hash[:8], record(t).duplicate_of,
             str(t.datetime_start), str(t.datetime_complete)) for t in finished]
    assert len(slots) == N_TRIALS, seen
    assert len(distinct) - len(slots) <= 1, seen
    assert len(finished) <= REPEAT_ALLOWANCE * N_TRIALS
    assert sorted(t.number for t in trials) == list(range(len(trials)))
    others = [t for t in trials if t not in finished]
    # The only other trials allowed: one started at the very instant the target was reached elsewhere.
    assert all(t.state == optuna.trial.TrialState.FAIL and (record(t).error or "").startswith("surplus")
               for t in others), [(t.number, t.state, TrialRecord.of(t)) for t in others]
    assert len(others) <= 1
    assert len({t.system_attrs[WORKER_ATTR] for t in finished}) == 2  # both workers ran trials
    assert any(t.state == optuna.trial.TrialState.COMPLETE for t in finished)

    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name("workers")
    assert experiment is not None
    parents = client.search_runs([experiment.experiment_id],
                                 filter_string=f"tags.`{ROLE_TAG}` = 'study'")
    assert len(parents) == 1, [r.info.run_id for r in parents]
    parent = parents[0]
    assert parent.data.tags[STUDY_TAG] == "workers" and parent.info.status == "FINISHED"
    nested = client.search_runs([experiment.experiment_id],
                                filter_string=f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'",
                                run_view_type=ViewType.ALL, max_results=1000)
    by_number = {int(r.data.tags[TRIAL_TAG]): r for r in nested}
    assert len(by_number) == len(nested) == len(trials)  # one run per trial, none twice
    status = RUN_STATUS
    for t in trials:
        run = by_number[t.number]
        assert run.data.tags[STATE_TAG] == t.state.name
        assert run.info.status == status[t.state.name] and run.info.lifecycle_stage == "active"
    return trials


def test_two_workers_on_one_machine_share_a_workdir(tmp_path: Path, postgres: Postgres) -> None:
    exp = workers_study(tmp_path)
    storage = postgres.database("shared_workdir")
    seconds = run_workers(exp, storage, [tmp_path, tmp_path])
    workdir = tmp_path / ".composer"
    trials = check_study(storage, f"sqlite:///{workdir / 'mlflow.db'}")
    # The local MLflow store was created once, under its lock: no parent run was made and deleted.
    from mlflow import MlflowClient
    from mlflow.entities import ViewType

    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("workers")
    assert experiment is not None
    every_parent = client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`{ROLE_TAG}` = 'study'", run_view_type=ViewType.ALL
    )
    assert len(every_parent) == 1
    # Indexes were shared through the workdir; private copies of the worker that found one in use
    # were removed when it exited.
    keys = {r.index.key for t in trials if (r := TrialRecord.of(t)) is not None and r.index is not None}
    assert keys and all((workdir / "qdrant" / key / "meta.json").is_file() for key in keys)
    workers = workdir / "qdrant" / ".workers"
    assert not workers.exists() or not [p for p in workers.iterdir() if p.is_dir()]
    print(f"\n2 workers, shared workdir: {N_TRIALS} trials in {seconds:.1f} s")


@pytest.fixture
def mlflow_server(tmp_path: Path, postgres: Postgres) -> Iterator[str]:
    """An MLflow tracking server on loopback with a PostgreSQL backend store, as docker-compose.yml runs."""
    from postgres import running_mlflow_server

    with running_mlflow_server(tmp_path, postgres.database("mlflow")) as url:
        yield url


def test_two_workers_with_separate_workdirs_and_a_tracking_server(
    tmp_path: Path, postgres: Postgres, mlflow_server: str
) -> None:
    """As on two machines: nothing shared but the Optuna database and the MLflow server."""
    exp = workers_study(tmp_path, tracking_uri=mlflow_server)
    storage = postgres.database("separate_workdirs")
    first, second = tmp_path / "machine-a", tmp_path / "machine-b"
    first.mkdir()
    second.mkdir()
    seconds = run_workers(exp, storage, [first, second])
    trials = check_study(storage, mlflow_server)
    keys = {r.index.key for t in trials if (r := TrialRecord.of(t)) is not None and r.index is not None}
    built = [{k for k in keys if (m / ".composer" / "qdrant" / k).is_dir()} for m in (first, second)]
    assert built[0] and built[1]  # each machine built the indexes it needed in its own workdir
    assert not (first / ".composer" / "mlflow.db").exists()
    print(f"\n2 workers, separate workdirs + MLflow server: {N_TRIALS} trials in {seconds:.1f} s")
