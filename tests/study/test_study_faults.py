"""A study under faults, as a new user tries it: trials that all fail end the study with one error (one
line per failed trial, tracebacks only with --debug), a dead LLM endpoint is found before the first trial,
a trial of a dead process is failed and retried at once, damaged or emptied study stores stop the study
naming the file, mistakes in the input stop it before any trial, and no credential reaches any store."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
from ended_trials import scripted_runner
from sample_study import write_experiment, write_space
from typer.testing import CliRunner

from composer.cli.app import app
from composer.errors import StudyStopped
from composer.record import LOST_ATTR, TrialRecord
from composer.study import _workers
from composer.study._optimize import CtrlC, FailureGuard, target_reached
from composer.study._workers import WORKER_ATTR, fail_trials_of_gone_workers, is_gone, worker_id
from composer.study.experiment import StopConfig

COMPOSER = str(Path(sys.executable).with_name("composer"))

DIMS: dict[str, Any] = {"retrieval.mode": {"choices": ["bm25"]},
                        "chunking.method": {"choices": ["paragraph", "sentence"]},
                        "retrieval.k": {"choices": [3, 5, 10]}}


def study_dir(root: Path, *, dims: dict[str, Any] = DIMS, defaults: dict[str, Any] | None = None,
              **fields: Any) -> Path:
    """The sample study "faults" (two random BM25 trials over 20 questions) with ``fields`` over it."""
    return write_experiment(root, dims=dims, defaults=defaults, n_questions=20,
                            **{"name": "faults", "objective": {"k": 5}, **fields})


def optimize(exp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    return subprocess.run([COMPOSER, *args, "optimize", str(exp)], cwd=exp.parent, capture_output=True,
                          text=True, env=env, timeout=300)


def trials(exp: Path) -> list[optuna.trial.FrozenTrial]:
    return load(exp).trials


def load(exp: Path) -> optuna.Study:
    storage = f"sqlite:///{exp.parent / '.composer' / 'optuna.db'}"
    return optuna.load_study(study_name="faults", storage=storage)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A study that ran to its end: the stores later tests damage (copied, per test)."""
    root = tmp_path_factory.mktemp("finished")
    exp = study_dir(root)
    result = CliRunner().invoke(app, ["optimize", str(exp)])
    assert result.exit_code == 0, result.output
    return root


def copy_of(finished: Path, tmp_path: Path) -> Path:
    """The finished study's directory, its SQLite stores as a stopped study leaves them: whole, no WAL
    (this test process still holds connections to the originals)."""
    target = tmp_path / "study"
    shutil.copytree(finished, target, ignore=shutil.ignore_patterns("*.db-wal", "*.db-shm"))
    for db in ("optuna.db", "mlflow.db"):
        shutil.copy(finished / ".composer" / db, target / ".composer" / db)  # unused without the WAL
        with sqlite3.connect(finished / ".composer" / db) as conn:
            conn.execute(f"VACUUM INTO '{target / '.composer' / (db + '.whole')}'")
        (target / ".composer" / (db + ".whole")).replace(target / ".composer" / db)
    return target / "experiment.yaml"


# -- trials that keep failing ----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_study_whose_trials_all_fail_stops_with_one_error_and_one_line_per_trial(tmp_path: Path) -> None:
    """A model directory that cannot be loaded fails every trial: the study stops after 3 (not 2,160 in
    five minutes), exit code 1, one line per failed trial, no traceback; --debug shows them."""
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{not json", encoding="utf-8")
    dims = {"retrieval.mode": {"choices": ["dense"]}, "retrieval.k": {"choices": [3, 5, 10]},
            "chunking.method": {"choices": ["paragraph", "sentence"]}}
    exp = study_dir(tmp_path, dims=dims, n_trials=10,
                    defaults={"embedding": {"provider": "sentence-transformers", "model": str(broken)}})
    result = optimize(exp)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "stopped: its last 3 trials failed; 3 x ComposerError: cannot load" in error[0]
    assert str(broken) in error[0] and "(#0, #1, #2)" in error[0]
    failed_lines = [line for line in result.stderr.splitlines() if " FAIL " in line]
    assert len(failed_lines) == 3
    assert all("cannot load sentence-transformers model" in line for line in failed_lines)
    assert [t.state.name for t in trials(exp)] == ["FAIL"] * 3

    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{exp.parent / '.composer' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("faults")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.`composer.role` = 'trial'")
    assert sorted(r.info.status for r in runs) == ["FAILED"] * 3

    # Rerun unchanged: the first new failure extends the streak, so it stops again after one trial.
    again = optimize(exp, "--debug")
    assert again.returncode == 1 and "its last 3 trials failed" in again.stderr
    assert len(trials(exp)) == 4
    assert "Traceback" in again.stderr  # --debug: Optuna's report of the failed trial, traceback and all


def record(state: str, *, error: str | None = None, failure: Any = None, repeat: int | None = None,
           config: str = "") -> optuna.trial.FrozenTrial:
    rec = TrialRecord({"n": config}, config, None, error=error, failure=failure, duplicate_of=repeat,
                      metrics={"composite": 0.5} if state == "COMPLETE" else {})
    return optuna.trial.create_trial(
        state=getattr(optuna.trial.TrialState, state), value=0.5 if state == "COMPLETE" else None,
        user_attrs={"composer": rec.to_dict()},
    )


def guarded(*trials: optuna.trial.FrozenTrial, **stop: Any) -> str | None:
    study = optuna.create_study()
    for t in trials:
        study.add_trial(t)
    return FailureGuard(StopConfig(**stop)).check(study.trials)


def test_what_counts_toward_the_stop_rules() -> None:
    boom = {"error": "RuntimeError: boom", "failure": "error"}
    assert guarded(*[record("FAIL", **boom)] * 3) is not None
    # A success breaks the streak; repeats, invalid combinations, surplus and lost trials say nothing.
    assert guarded(*[record("FAIL", **boom)] * 2, record("COMPLETE"), record("FAIL", **boom)) is None
    noise = [record("COMPLETE", repeat=0), record("FAIL", error="bad combo", failure="invalid"),
             record("FAIL", error="surplus", failure="surplus"), record("FAIL")]
    assert guarded(record("FAIL", **boom), *noise, record("FAIL", **boom), *noise) is None
    assert guarded(record("FAIL", **boom), *noise, record("FAIL", **boom), record("FAIL", **boom)) is not None
    # The share: from the 10th trial on, more than half failed (never two in a row here).
    alternating = [record("FAIL", **boom) if i % 3 else record("COMPLETE", config=str(i)) for i in range(12)]
    why = guarded(*alternating, consecutive_failures=None)
    assert why is not None and why.startswith("8 of its 12 trials failed (over 50%)")
    assert guarded(*alternating[:9], consecutive_failures=None) is None  # too few trials yet
    assert guarded(*alternating, consecutive_failures=None, failed_share=None) is None  # both rules off
    with pytest.raises(StudyStopped, match=r"study 's' stopped: .*run the same command again") as stopped:
        guard = FailureGuard(StopConfig())
        guard.reason = "its last 3 trials failed"
        guard.raise_if_stopped("s")
    assert stopped.value.exit_code == 1


@pytest.mark.slow
def test_a_space_of_invalid_combinations_ends(tmp_path: Path) -> None:
    """Invalid sampled combinations hold no slot but spend the study's allowance: it ends, with the
    error of the first, instead of sampling forever."""
    dims = {"retrieval.mode": {"choices": ["bm25"]}, "chunking.method": {"choices": ["fixed_chars"]},
            "chunking.size": {"choices": [100, 200]}, "chunking.overlap": {"choices": [300, 400]}}
    exp = study_dir(tmp_path, dims=dims)
    result = CliRunner().invoke(app, ["optimize", str(exp)])
    assert result.exit_code == 2 and "no trial of study faults completed" in result.output
    assert "overlap" in result.output
    done = trials(exp)
    assert len(done) == 4 and {t.state.name for t in done} == {"FAIL"}  # 2 x n_trials
    assert target_reached(load(exp), 2)


# -- a dead LLM --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "reason"),
    [
        ("http://127.0.0.1:{port}/v1?api-key=QS-SECRET", "(connection: "),
        ("http://user:PW-SECRET@127.0.0.1:{port}/v1", "credentials encoded in URL"),  # litellm cannot
    ],
)
def test_an_unreachable_llm_is_found_before_the_first_trial(
    tmp_path: Path, endpoint: str, reason: str
) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exp = study_dir(tmp_path, llm={"model": "openai/fake", "api_base": endpoint.format(port=port),
                                   "max_retries": 0})
    result = CliRunner().invoke(app, ["optimize", str(exp)])
    assert result.exit_code == 2
    assert result.output.startswith("error: the LLM openai/fake at http://")
    assert "did not answer a test request before the study started" in result.output
    assert reason in result.output and "SECRET" not in result.output
    assert not (tmp_path / ".composer" / "optuna.db").exists()  # not one trial


def test_an_unreachable_tracking_server_is_found_before_the_first_trial(tmp_path: Path) -> None:
    """MLflow's client would retry with back-off for minutes; the study names the server at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exp = study_dir(tmp_path, mlflow={"traces": 0, "tracking_uri": f"http://u:TS-SECRET@127.0.0.1:{port}"})
    started = time.monotonic()
    result = CliRunner().invoke(app, ["optimize", str(exp)])
    assert result.exit_code == 2, result.output
    assert "the MLflow tracking server http://***@127.0.0.1" in result.output
    assert "does not answer" in result.output and "TS-SECRET" not in result.output
    assert time.monotonic() - started < 60
    assert all(t.state == optuna.trial.TrialState.FAIL for t in trials(exp))  # not one trial ran


# -- dead processes ------------------------------------------------------------------------------------------


def test_a_trial_of_a_gone_worker_is_failed_and_retried_at_once(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = worker_id(gone.pid)
    alive = worker_id()
    machine, _, _ = alive.rsplit(":", 2)
    host, boot, namespace = machine.split("|")
    elsewhere = "another-host|ab12cd34|4026531836:1:123"
    assert is_gone(dead) and not is_gone(alive) and not is_gone(elsewhere)
    assert is_gone(f"{machine}:{os.getpid()}:1")  # this pid, started another time: reused by another process
    # The same host name in another pid namespace (a container) or after a reboot: not provably gone.
    for other in (f"{host}|{boot}|1:{gone.pid}:1", f"{host}|00000000|{namespace}:{gone.pid}:1"):
        assert not is_gone(other)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'o.db'}", study_name="s")
    running = []
    for worker in (dead, alive, elsewhere, dead):
        trial = study.ask({"x": optuna.distributions.IntDistribution(0, 9)})
        study._storage.set_trial_system_attr(trial._trial_id, WORKER_ATTR, worker)
        if len(running) < 3:  # the last one died while its parameters were drawn: no record yet
            TrialRecord({"x": trial.params["x"]}, "h").save(trial)
        running.append(trial.number)
    assert [t.number for t in fail_trials_of_gone_workers(study)] == [running[0], running[3]]
    assert fail_trials_of_gone_workers(study) == []  # once
    by_number = {t.number: t for t in study.trials}
    assert by_number[running[0]].state.name == by_number[running[3]].state.name == "FAIL"
    assert by_number[running[1]].state.name == by_number[running[2]].state.name == "RUNNING"
    _workers.recover_lost_trials(study)
    _workers.recover_lost_trials(study)  # a retry is queued once
    # Retried: the trial that had its configuration; the other is drawn anew, whole, in its place.
    [retry] = [t for t in study.trials if t.state.name == "WAITING"]
    assert retry.params == by_number[running[0]].params
    assert retry.system_attrs["failed_trial"] == running[0] and WORKER_ATTR not in retry.system_attrs


def test_a_trial_lost_too_often_is_not_retried_again() -> None:
    study = optuna.create_study()
    trial = optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, params={}, distributions={},
                                      system_attrs={"retry_history": [0, 1, 2], "failed_trial": 0})
    study.add_trial(trial)
    _workers.retry_lost_trial(study, study.trials[0])
    assert len(study.trials) == 1


# -- damaged and emptied stores ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["empty", "garbage", "bytes in the middle"])
def test_a_damaged_optuna_storage_stops_with_the_file_and_the_way_out(
    finished: Path, tmp_path: Path, damage: str
) -> None:
    exp = copy_of(finished, tmp_path)
    db = exp.parent / ".composer" / "optuna.db"
    spoil(db, damage)
    before = db.read_bytes()
    for command in (["optimize", str(exp)], ["trials", "--experiment", str(exp)]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, result.output
        assert f"the Optuna storage {db} is " in result.output and "Restore it from a backup" in result.output
        assert "Traceback" not in result.output
    assert db.read_bytes() == before  # never recreated


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["empty", "garbage"])
def test_a_damaged_mlflow_store_stops_with_the_file(finished: Path, tmp_path: Path, damage: str) -> None:
    """An emptied mlflow.db would silently become a new, empty history; a garbage one a traceback."""
    exp = copy_of(finished, tmp_path)
    db = exp.parent / ".composer" / "mlflow.db"
    spoil(db, damage)
    result = CliRunner().invoke(app, ["optimize", str(exp), "--n-trials", "3"])
    assert result.exit_code == 2, result.output
    assert f"the MLflow store {db} is " in result.output and "Traceback" not in result.output
    assert len(trials(exp)) == 2  # no trial ran


@pytest.mark.slow
def test_a_lost_optuna_storage_is_noticed_through_mlflow(finished: Path, tmp_path: Path) -> None:
    """optuna.db deleted while MLflow holds the study's trials: starting again from trial 0 would log
    trial-000 twice under one parent."""
    exp = copy_of(finished, tmp_path)
    (exp.parent / ".composer" / "optuna.db").unlink()
    result = CliRunner().invoke(app, ["optimize", str(exp)])
    assert result.exit_code == 2
    assert "MLflow holds trials of study 'faults'" in result.output
    assert "another name (--study-name NEW)" in result.output


@pytest.mark.slow
def test_a_replaced_mlflow_store_is_noticed_through_the_optuna_storage(
    finished: Path, tmp_path: Path
) -> None:
    exp = copy_of(finished, tmp_path)
    (exp.parent / ".composer" / "mlflow.db").unlink()
    result = CliRunner().invoke(app, ["optimize", str(exp), "--n-trials", "3"])
    assert result.exit_code == 2
    assert "no longer holds run" in result.output and "parent of study 'faults'" in result.output


def spoil(db: Path, damage: str) -> None:
    if damage == "empty":
        db.write_bytes(b"")
        os.utime(db, (0, 0))  # left empty long ago, not a store another worker is creating now
    elif damage == "garbage":
        db.write_bytes(os.urandom(8192))
    else:
        data = bytearray(db.read_bytes())
        middle = len(data) // 2
        data[middle : middle + 4096] = os.urandom(4096)
        db.write_bytes(bytes(data))


# -- mistakes in the input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("objective",
         "(field 'objective.metrics'): unknown metric 'recal'; known:"),
        ("space:when",
         "(field 'dimensions.retrieval.fusion.when.retrieval.mode'): retrieval.mode never takes the value "
         "'hybird'"),
        ("questions:foreign", "none of the 2 relevant ids is in the corpus"),
    ],
)
def test_mistakes_stop_the_study_before_any_trial(tmp_path: Path, change: str, message: str) -> None:
    exp = study_dir(tmp_path)
    if change == "space:when":
        write_space(tmp_path, {**DIMS, "retrieval.fusion": {"choices": ["rrf"],
                                                            "when": {"retrieval.mode": "hybird"}}})
    elif change == "questions:foreign":
        (tmp_path / "questions.jsonl").write_text(
            '{"question": "ما هذا؟", "relevant_ids": ["elsewhere-1"]}\n'
            '{"question": "من هذا؟", "relevant_ids": ["elsewhere-2"]}\n', encoding="utf-8")
    else:
        study_dir(tmp_path, objective={"k": 5, "metrics": {"recal": 1.0}})
    result = CliRunner().invoke(app, ["optimize", str(exp)])
    assert result.exit_code == 2 and message in result.output, result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / ".composer" / "optuna.db").exists()


def test_strict_turns_a_share_of_missing_relevant_ids_into_an_error(tmp_path: Path) -> None:
    exp = study_dir(tmp_path)
    lines = (tmp_path / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    lines.append('{"question": "ما هذا؟", "relevant_ids": ["elsewhere-1"]}')
    (tmp_path / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["optimize", str(exp), "--strict"])
    assert result.exit_code == 2 and f"questions.jsonl:{len(lines)} (field 'relevant_ids')" in result.output


# -- credentials ---------------------------------------------------------------------------------------------

SECRET_DIMS = {
    "retrieval.mode": {"choices": ["bm25"]}, "retrieval.k": {"choices": [3, 5]},
    "generation": {"choices": {
        "remote": {"api_base": "https://user:PW-SECRET@llm.example/v1?api-key=QS-SECRET&api-version=1"}}},
}


@pytest.mark.slow
def test_no_credential_reaches_any_store(tmp_path: Path) -> None:
    """A URL with a password and a key in its query string, in a search space bundle: masked in the
    Optuna storage, MLflow (params, tags, artifacts), the spool, caches, exports and the output."""
    exp = study_dir(tmp_path, dims=SECRET_DIMS)
    result = CliRunner().invoke(app, ["optimize", str(exp)])
    assert result.exit_code == 0, result.output
    out = tmp_path / "best.yaml"
    exported = CliRunner().invoke(app, ["export", "faults", "--experiment", str(exp), "--out", str(out)])
    assert exported.exit_code == 0, exported.output
    scanned = 0
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.name not in ("space.yaml",):
            blob = path.read_bytes()
            scanned += 1
            assert b"PW-SECRET" not in blob and b"QS-SECRET" not in blob, path
    for db in (tmp_path / ".composer").glob("*.db"):  # and what SQLite may hold outside its pages
        with sqlite3.connect(db) as conn:
            dump = "\n".join(conn.iterdump())
        assert "PW-SECRET" not in dump and "QS-SECRET" not in dump, db
    assert scanned > 20 and "PW-SECRET" not in result.output + exported.output
    assert "api-key=***" in out.read_text(encoding="utf-8")


def test_a_credential_in_a_plain_choice_is_refused(tmp_path: Path) -> None:
    """Optuna stores every choice of a categorical dimension: only bundles (stored by label) may hold one."""
    exp = study_dir(tmp_path, dims={**DIMS, "generation.api_base": {
        "choices": ["https://llm.example/v1?key=QS-SECRET"]}})
    result = CliRunner().invoke(app, ["optimize", str(exp)])
    assert result.exit_code == 2
    assert "(field 'dimensions.generation.api_base.choices'): a choice holds a credential" in result.output
    assert "QS-SECRET" not in result.output


def test_a_trial_draws_from_its_place_in_the_study() -> None:
    """Seeds follow the place: trials cut off and run again, or cut off while drawing, and surplus trials
    take none, so a killed and resumed study proposes what the uninterrupted one did; a trial cut off too
    often keeps its place, so its configuration is not proposed anew forever."""
    from composer.study._sampling import place_in_study

    study = optuna.create_study()
    fail = optuna.trial.TrialState.FAIL

    def add(state: optuna.trial.TrialState = optuna.trial.TrialState.COMPLETE, *, drawn: bool = True,
            failure: Any = None, history: list[int] | None = None) -> None:
        attrs = {"composer": TrialRecord({}, "h", None, failure=failure).to_dict()} if drawn else {}
        system = {"retry_history": history} if history else {}
        value = 0.0 if state.name == "COMPLETE" else None
        trial = optuna.trial.create_trial(state=state, value=value, user_attrs=attrs, system_attrs=system)
        study.add_trial(trial)

    add()  # 0
    add(fail)  # 1: lost, retried by 2
    add(history=[1])  # 2: the retry
    add(fail, drawn=False)  # 3: lost while drawing
    add(fail, failure="surplus")  # 4
    add(fail, failure="error")  # 5: a failed pipeline keeps its place
    add(fail, history=[1, 2])  # 6: lost again, its retries spent: keeps its place
    assert [place_in_study(study, n) for n in range(8)] == [0, 1, 1, 2, 2, 2, 3, 4]


class Lost:
    """A tracker that keeps what it is told of lost and surplus trials."""

    def __init__(self) -> None:
        self.trials: list[tuple[Any, str]] = []

    def lost(self, trials: list[Any]) -> None:
        self.trials.extend((trial, trial.user_attrs[LOST_ATTR]) for trial in trials)

    def submit(self, trial: Any) -> None:
        """Ended trials are not what it keeps."""


def test_a_retry_queued_twice_runs_once() -> None:
    """Two workers recovering the same lost trial at once both queue a retry: the later one is surplus."""
    from composer.study.runner import SurplusTrial

    study = optuna.create_study()
    dist = {"x": optuna.distributions.IntDistribution(0, 9)}
    lost = optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, params={"x": 4}, distributions=dist,
                                     user_attrs={"composer": TrialRecord({"x": 4}, "h", None).to_dict()})
    study.add_trial(lost)
    for _ in range(2):
        study.enqueue_trial({"x": 4})  # stands for retry_lost_trial, run by two processes
    for t in study.get_trials(states=(optuna.trial.TrialState.WAITING,)):
        study._storage.set_trial_system_attr(t._trial_id, "retry_history", [0])
    ran: list[int] = []
    objective = scripted_runner(lambda trial: ran.append(trial.number) or 1.0, None)
    study.optimize(objective, n_trials=2, catch=(SurplusTrial,))
    assert ran == [1]
    record = TrialRecord.of(study.trials[2])
    assert study.trials[2].state.name == "FAIL" and record is not None and record.failure == "surplus"
    assert record.error == "surplus: trial #1 already runs this retry"


def test_a_failure_the_pipeline_did_not_record_is_still_the_pipelines() -> None:
    """An error after the trial's record was saved (a full disk, say) must not pass for a trial whose
    process died: it counts toward the stop rules, and is never retried as lost."""

    def run(trial: optuna.Trial) -> float:
        TrialRecord({"x": 1}, "h", metrics={"composite": 0.5}).save(trial)
        raise OSError(28, "No space left on device")

    study = optuna.create_study()
    study.optimize(scripted_runner(run, None), n_trials=1, catch=(OSError,))
    record = TrialRecord.of(study.trials[0])
    assert record is not None and record.failure == "error"
    assert record.error == "OSError: [Errno 28] No space left on device"


def test_a_worker_that_dies_during_the_study_is_noticed_when_the_next_trial_ends(tmp_path: Path) -> None:
    """Its trial holds no slot (no worker stops one trial short), is queued again and gets its FAILED
    run; a trial running for long without a worker tag (its process killed as Optuna created it) too."""
    from composer.study._optimize import after_each_trial

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'o.db'}", study_name="s")
    dist = {"x": optuna.distributions.IntDistribution(0, 9)}
    dead = study.ask(dist)
    study._storage.set_trial_system_attr(dead._trial_id, WORKER_ATTR, worker_id(gone.pid))
    TrialRecord({"x": dead.params["x"]}, "h", None).save(dead)
    untagged = study.ask(dist)
    time.sleep(0.6)
    fresh = study.ask(dist)  # untagged but just created: left alone
    seen: list[list[str]] = []
    tracker = Lost()
    callback = after_each_trial(lambda s, t, trials: seen.append([x.state.name for x in trials]),
                                tracker=tracker, untagged_after_s=0.5)  # type: ignore[arg-type]
    callback(study, study.trials[0])
    assert seen == [["FAIL", "FAIL", "RUNNING", "WAITING"]]
    assert [t.number for t, _ in tracker.trials] == [dead.number, untagged.number]
    assert study.trials[3].params == dead.params and study.trials[fresh.number].state.name == "RUNNING"


def test_a_trial_failed_by_another_process_while_it_ran_does_not_end_the_study(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Another process took this one for dead (a missed heartbeat) and failed its trial: Optuna's tell
    raises when the trial ends; the study goes on (the trial is queued again) instead of a traceback."""
    from composer.study._optimize import optimize

    study = optuna.create_study()
    ran: list[int] = []

    def run(trial: optuna.Trial) -> float:
        ran.append(trial.number)
        if trial.number == 0:
            study._storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
        return 1.0

    def enough(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if len(ran) == 3:
            study.stop()

    optimize(study, scripted_runner(run, None), timeout=None, callback=enough)
    assert ran == [0, 1, 2] and [t.state.name for t in study.trials] == ["FAIL", "COMPLETE", "COMPLETE"]
    assert "trial #0 was failed by another process that took this one for dead" in caplog.text


def test_a_grid_tries_a_failed_point_again_in_a_later_run() -> None:
    """A point whose pipeline failed is not proposed again in the same run (the stop rules would end a
    run failing on it), but the next run, the cause fixed, tries it again; invalid points never."""
    from composer.study._sampling import ConditionalGridSampler
    from composer.study.fate import GRID_ID

    study = optuna.create_study()
    fail = optuna.trial.TrialState.FAIL

    def add(point: int, failure: str, worker: str) -> None:
        record = TrialRecord({}, "h", error="x", failure=failure)  # type: ignore[arg-type]
        study.add_trial(optuna.trial.create_trial(state=fail, user_attrs={"composer": record.to_dict()},
                                                  system_attrs={GRID_ID: point, WORKER_ATTR: worker}))

    add(0, "error", worker_id())  # this run
    add(1, "error", "an-earlier-run")
    add(2, "invalid", "an-earlier-run")
    grid = ConditionalGridSampler([{"x": i} for i in range(4)])
    assert grid._taken(study.get_trials(deepcopy=False)) == {0, 2}


def test_a_storage_url_with_options_is_checked_as_its_file(tmp_path: Path) -> None:
    """`?timeout=30` (for several SQLite workers) must not hide the file from the checks."""
    from composer.errors import InputError
    from composer.study._storage import make_storage

    db = tmp_path / "optuna.db"
    db.write_bytes(b"")
    os.utime(db, (0, 0))
    with pytest.raises(InputError, match=r"optuna.db is empty \(0 bytes\)"):
        make_storage(f"sqlite:///{db}?timeout=30")
    assert db.read_bytes() == b""


class _SlowFinalizer:
    def __del__(self) -> None:
        time.sleep(1.0)  # the Ctrl-C lands here, as it may in a connection's or a file's finalizer


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_ctrl_c_python_drops_in_a_finalizer_still_stops_the_study() -> None:
    """A KeyboardInterrupt raised inside ``__del__`` is printed and dropped by Python, so the study ran on
    to its end and exited 0; CtrlC remembers the signal and the trial's end raises it again."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with CtrlC() as ctrl_c:
        ctrl_c.hook(optuna.create_study(), None, [])  # type: ignore[arg-type]  # no Ctrl-C: nothing happens
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        finalized = _SlowFinalizer()
        del finalized  # no KeyboardInterrupt comes out of here: Python drops it
        with pytest.raises(KeyboardInterrupt):
            ctrl_c.hook(optuna.create_study(), None, [])  # type: ignore[arg-type]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
