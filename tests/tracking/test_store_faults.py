"""Stores and files under the second round of faults (issue 19): a work dir whose name a URL would
misread keeps every file inside it, a full disk is one line naming the file and never leaves a
half-made MLflow store, a foreign or newer database is refused without being written, a read-only work
dir can be read, and a blank relevant id is reported."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from contextlib import closing
from pathlib import Path

import pytest
from sample_study import write_experiment

from composer.data import load_questions
from composer.errors import InputError
from composer.files import NoSpaceError, disk_full_error
from composer.mlflow_store import prepare_mlflow_store
from composer.store import SqliteStore, sqlite_file, sqlite_url

COMPOSER = str(Path(sys.executable).with_name("composer"))
ODD = "w%41x?mode=ro#frag"
"""A work dir name that SQLAlchemy reads as ``wAx`` with the query ``mode=ro`` and a URL parser cuts at #."""

FULL_DISK = textwrap.dedent(
    """
    # Loaded by every Python process of the test's command (the study and its MLflow writer): SQLite's
    # max_page_count makes the database whose path contains COMPOSER_TEST_FULL refuse to grow past
    # COMPOSER_TEST_PAGES pages beyond its size when opened, with the error of a full disk (SQLITE_FULL).
    import os

    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    @event.listens_for(Engine, "connect")
    def _full(conn, record):
        names = [row[2] for row in conn.execute("PRAGMA database_list")]
        if any(os.environ["COMPOSER_TEST_FULL"] in (name or "") for name in names):
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            conn.execute(f"PRAGMA max_page_count={pages + int(os.environ['COMPOSER_TEST_PAGES'])}")
    """
)


def study(root: Path, workdir: str = ".composer") -> Path:
    return write_experiment(root, n_questions=12, name="stores", objective={"k": 5}, mlflow={"traces": 1},
                            workdir=workdir)


def composer(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COMPOSER, *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200", **(env or {})})


def full_disk(tmp_path: Path, database: str, pages: int) -> dict[str, str]:
    """The environment of a command whose ``database`` (a path fragment) fills up after ``pages``."""
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(FULL_DISK, encoding="utf-8")
    path = os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")])
    return {"PYTHONPATH": path, "COMPOSER_TEST_FULL": database, "COMPOSER_TEST_PAGES": str(pages)}


def error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def odd_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished study whose work dir is ``w%41x?mode=ro#frag``, beside its experiment."""
    root = tmp_path_factory.mktemp("odd")
    exp = study(root, ODD)
    result = composer(root, "optimize", str(exp))
    assert result.returncode == 0, result.stderr
    return exp


# -- 19.4: URLs built from paths ------------------------------------------------------------------------


@pytest.mark.parametrize("name", [ODD, "50%25 x", "plain", "دراسة #1"])
def test_a_sqlite_url_names_its_file_for_sqlalchemy(tmp_path: Path, name: str) -> None:
    path = tmp_path / name / "optuna.db"
    assert sqlite_file(sqlite_url(path)) == path
    assert sqlite_file(sqlite_url(path, mlflow=True)) == path
    escaped = any(c in name for c in "%?#")  # MLflow reads the others as SQLAlchemy does
    assert sqlite_url(path, mlflow=True).startswith("sqlite+pysqlite:///" if escaped else "sqlite:///")


@pytest.mark.slow
def test_a_study_in_a_work_dir_a_url_would_misread_keeps_every_file_inside_it(odd_study: Path) -> None:
    """Optuna and MLflow once opened ``./wAx`` (and MLflow made an empty ``w%2541x...`` folder)."""
    root = odd_study.parent
    assert sorted(p.name for p in root.iterdir()) == sorted(
        [ODD, "experiment.yaml", "questions.jsonl", "space.yaml"]
    )
    work = root / ODD
    assert (work / "optuna.db").stat().st_size > 0 and (work / "mlflow.db").stat().st_size > 0

    from mlflow import MlflowClient

    client = MlflowClient(sqlite_url(work / "mlflow.db", mlflow=True))
    experiment = client.get_experiment_by_name("stores")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.`composer.role` = 'trial'")
    listed = composer(root, "trials", "--experiment", str(odd_study), "--csv")
    assert listed.returncode == 0, listed.stderr
    assert len(runs) == len(listed.stdout.strip().splitlines()) - 1 >= 2  # one run per trial
    assert sorted(p.name for p in root.iterdir()) == sorted(
        [ODD, "experiment.yaml", "questions.jsonl", "space.yaml"]
    )


# -- 19.6: a full disk ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_full_disk_while_the_mlflow_store_is_created_leaves_no_half_made_store(tmp_path: Path) -> None:
    """The store is migrated in a temporary file: a full disk half-way leaves nothing at mlflow.db (it
    once left ``_alembic_tmp_experiments`` there, and every later run failed), one line, exit 2."""
    exp = study(tmp_path)
    work = tmp_path / ".composer"
    no_cache = tmp_path / "cache-is-a-file"  # no kept empty store: this one is migrated in place
    no_cache.write_text("", encoding="utf-8")
    env = {**full_disk(tmp_path, "mlflow.db", 40), "COMPOSER_CACHE_DIR": str(no_cache)}
    result = composer(tmp_path, "optimize", str(exp), env=env)
    assert result.returncode == 2, result.stderr
    assert error_lines(result) == [f"error: no space left on device writing {work / 'mlflow.db'}"]
    assert "Traceback" not in result.stderr
    made = [p.name for p in work.iterdir() if p.name.startswith(("mlflow.db", ".mlflow.db"))]
    assert made == ["mlflow.db.lock"]  # the lock its creators take turns under; no store, no temporary file

    again = composer(tmp_path, "optimize", str(exp))
    assert again.returncode == 0, again.stderr


@pytest.mark.slow
def test_a_full_disk_mid_study_is_one_line_naming_the_file(tmp_path: Path) -> None:
    """Optuna failing to store a trial's end once came out as ``AssertionError: Should not reach``, rc 1."""
    exp = study(tmp_path)
    assert composer(tmp_path, "optimize", str(exp)).returncode == 0
    storage = tmp_path / ".composer" / "optuna.db"
    env = full_disk(tmp_path, "optuna.db", 1)
    result = composer(tmp_path, "optimize", str(exp), "--n-trials", "8", env=env)
    assert result.returncode == 2, result.stderr
    assert error_lines(result) == [f"error: no space left on device writing {storage}"]
    assert "Traceback" not in result.stderr and "Should not reach" not in result.stderr


def test_a_full_disk_under_a_cache_names_its_file(tmp_path: Path) -> None:
    schema = ["CREATE TABLE IF NOT EXISTS t (v BLOB)"]
    store = SqliteStore(tmp_path / "cache.sqlite", schema, busy_timeout_s=1)
    pages = store.query("PRAGMA page_count")[0][0]
    store.execute(f"PRAGMA max_page_count={pages + 2}")
    with pytest.raises(NoSpaceError) as raised:
        store.execute_many("INSERT INTO t VALUES (?)", [(b"x" * 4096,)] * 8)
    assert str(raised.value) == f"no space left on device writing {tmp_path / 'cache.sqlite'}"
    store.close()


def test_a_full_disk_is_found_under_the_error_raised_while_handling_it() -> None:
    """As Optuna raises ``AssertionError("Should not reach.")`` while handling a write that failed."""
    try:
        try:
            raise OSError(28, "No space left on device", "/data/spool/x.pkl")
        except OSError:
            raise AssertionError("Should not reach.")  # noqa: B904
    except AssertionError as exc:
        found = disk_full_error(exc)
    assert found is not None and str(found) == "no space left on device writing /data/spool/x.pkl"
    assert disk_full_error(AssertionError("Should not reach.")) is None


# -- 19.6: a half-made MLflow store -----------------------------------------------------------------------


def half_made(file: Path) -> None:
    """An MLflow store whose creation ran out of room half-way, as MLflow leaves it."""
    from mlflow.store.db.utils import _initialize_tables, create_sqlalchemy_engine
    from sqlalchemy import event

    engine = create_sqlalchemy_engine(sqlite_url(file, mlflow=True))
    event.listen(engine, "connect", lambda conn, _: conn.execute("PRAGMA max_page_count=60"))
    # SQLite's own error, or Composer's one line for it once its engine hook is installed in this process
    with pytest.raises(Exception, match=r"database or disk is full|no space left on device"):
        _initialize_tables(engine)
    engine.dispose()


@pytest.mark.slow
def test_a_half_made_mlflow_store_without_runs_is_rebuilt_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from mlflow import MlflowClient

    file = tmp_path / "mlflow.db"
    half_made(file)
    uri = sqlite_url(file, mlflow=True)
    code = f"from mlflow import MlflowClient; MlflowClient({uri!r}).search_experiments()"
    opened = subprocess.run(  # in another process: its engine would keep the old file open in this one
        [sys.executable, "-c", code],
        capture_output=True, text=True, timeout=120,
    )
    assert opened.returncode != 0 and "already exists" in opened.stderr  # what every later run met
    with caplog.at_level(logging.WARNING, logger="composer.mlflow_store"):
        prepare_mlflow_store(uri)
    assert f"the MLflow store {file} was left half-made (stopped at migration" in caplog.text
    assert "held no runs: rebuilt" in caplog.text
    assert MlflowClient(uri).create_experiment("after")


def test_a_half_made_mlflow_store_with_runs_is_left_alone(tmp_path: Path) -> None:
    from mlflow import MlflowClient

    file = tmp_path / "mlflow.db"
    uri = sqlite_url(file, mlflow=True)
    prepare_mlflow_store(uri)
    client = MlflowClient(uri)
    client.create_run(client.create_experiment("e"))
    with closing(sqlite3.connect(file)) as conn, conn:  # a batch migration of a later MLflow, interrupted
        conn.execute("CREATE TABLE _alembic_tmp_experiments (experiment_id INTEGER)")
    before = digest(file)
    with pytest.raises(InputError, match=r"half-made .*_alembic_tmp_experiments.* holds 1 runs"):
        prepare_mlflow_store(uri)
    assert digest(file) == before


def test_the_temporary_store_of_a_killed_creator_is_removed_by_the_next(tmp_path: Path) -> None:
    stale = tmp_path / ".mlflow.db.k1ll3d.tmp"
    stale.write_bytes(b"SQLite format 3\x00")
    (tmp_path / ".mlflow.db.k1ll3d.tmp-journal").write_bytes(b"")
    prepare_mlflow_store(sqlite_url(tmp_path / "mlflow.db", mlflow=True))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]


def test_a_new_store_is_a_copy_of_the_empty_store_kept_once_per_mlflow_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new study's writer used to wait ~3 s (11 s on a loaded machine) for MLflow's migrations; the
    migrated empty store is kept in the cache folder and copied. A damaged copy is made again."""
    from mlflow import MlflowClient
    from mlflow.version import VERSION

    from composer import mlflow_store

    monkeypatch.setenv("COMPOSER_CACHE_DIR", str(tmp_path / "cache"))
    prepare_mlflow_store(sqlite_url(tmp_path / "a.db", mlflow=True))
    template = tmp_path / "cache" / "mlflow-stores" / f"empty-{VERSION}.db"
    assert template.is_file()

    def no_migrations(file: Path) -> None:
        raise AssertionError(f"migrated {file}")

    monkeypatch.setattr(mlflow_store, "_migrate", no_migrations)
    uri = sqlite_url(tmp_path / "b.db", mlflow=True)
    prepare_mlflow_store(uri)
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("copied"))
    client.log_metric(run.info.run_id, "m", 1.0)
    assert client.get_run(run.info.run_id).data.metrics == {"m": 1.0}

    template.write_bytes(b"not a database")
    with pytest.raises(AssertionError, match="migrated"):  # damaged: migrated again, not copied
        prepare_mlflow_store(sqlite_url(tmp_path / "c.db", mlflow=True))
    assert not (tmp_path / "c.db").exists()
    monkeypatch.undo()
    monkeypatch.setenv("COMPOSER_CACHE_DIR", str(tmp_path / "cache"))
    prepare_mlflow_store(sqlite_url(tmp_path / "c.db", mlflow=True))
    assert template.read_bytes().startswith(b"SQLite format 3\x00")
    assert sorted(p.name for p in tmp_path.glob("*.db*")) == ["a.db", "b.db", "c.db"]


def test_a_full_disk_while_the_empty_store_is_copied_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from composer import mlflow_store

    monkeypatch.setenv("COMPOSER_CACHE_DIR", str(tmp_path / "cache"))
    prepare_mlflow_store(sqlite_url(tmp_path / "first.db", mlflow=True))  # the empty store is kept

    def full(source: Path, target: Path) -> None:
        Path(target).write_bytes(b"SQLite")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(mlflow_store.shutil, "copyfile", full)
    file = tmp_path / "work" / "mlflow.db"
    with pytest.raises(NoSpaceError) as raised:
        prepare_mlflow_store(sqlite_url(file, mlflow=True))
    assert str(raised.value) == f"no space left on device writing {file}"
    assert list(file.parent.iterdir()) == []


def test_an_mlflow_tracking_uri_at_another_database_is_refused_unwritten(tmp_path: Path) -> None:
    file = tmp_path / "optuna.db"
    with closing(sqlite3.connect(file)) as conn, conn:
        conn.execute("CREATE TABLE studies (study_id INTEGER)")
    before = digest(file)
    with pytest.raises(InputError, match="is not an MLflow store"):
        prepare_mlflow_store(sqlite_url(file))
    assert digest(file) == before


# -- Also: foreign and newer Optuna storages, a read-only work dir ----------------------------------------


@pytest.mark.slow
def test_storage_pointed_at_the_mlflow_store_is_refused_and_left_unwritten(
    odd_study: Path, tmp_path: Path
) -> None:
    mlflow_db = tmp_path / "mlflow.db"
    shutil.copy(odd_study.parent / ODD / "mlflow.db", mlflow_db)
    before = digest(mlflow_db)
    result = composer(tmp_path, "trials", "stores", "--storage", sqlite_url(mlflow_db))
    assert result.returncode == 2, result.stderr
    assert error_lines(result) == [
        f"error: field 'storage': {mlflow_db} is an MLflow store, not an Optuna storage: give --storage "
        "(or storage:) an Optuna storage, or a new file"
    ]
    assert digest(mlflow_db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]


@pytest.mark.slow
def test_a_storage_of_a_newer_optuna_is_one_clear_line(odd_study: Path, tmp_path: Path) -> None:
    """Optuna's own words: "no longer compatible with the table schema (set up by optuna 5.0.0)"."""
    storage = tmp_path / "optuna.db"
    with closing(sqlite3.connect(odd_study.parent / ODD / "optuna.db")) as conn:  # closed now, not at a
        conn.execute(f"VACUUM INTO '{storage}'")  # collection that would take its -wal from a later copy
    with closing(sqlite3.connect(storage)) as conn, conn:
        conn.execute("UPDATE alembic_version SET version_num = 'v9.0.0.a'")
        conn.execute("UPDATE version_info SET schema_version = 99, library_version = '9.0.0'")
    result = composer(tmp_path, "trials", "stores", "--storage", sqlite_url(storage))
    assert result.returncode == 2, result.stderr
    import optuna

    assert error_lines(result) == [
        f"error: field 'storage': the Optuna storage {sqlite_url(storage)} was written by a newer Optuna "
        f"(schema v9.0.0.a, optuna 9.0.0) than this one ({optuna.__version__}): upgrade Optuna "
        "(pip install -U optuna) or give another --storage"
    ]


def _read_only_mount_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _read_only_mount_works(), reason="needs unshare for a read-only bind mount")
def test_trials_and_export_read_a_read_only_work_dir(odd_study: Path, tmp_path: Path) -> None:
    """The work dir mounted read-only (as root, a chmod would not stop writes): both commands only read.
    SQLite opens a WAL file only through a -shm it cannot create there: it once failed "unable to open
    database file"."""
    root = tmp_path / "study"
    # A stopped study leaves no -wal or -shm; one a reader holds open is no part of the study.
    shutil.copytree(odd_study.parent, root, ignore=shutil.ignore_patterns("*.db-wal", "*.db-shm"))
    work = root / ODD
    before = {p.name: digest(p) for p in work.iterdir() if p.is_file()}
    out = tmp_path / "best.yaml"
    script = (
        f"mount --bind -o ro {_sh(work)} {_sh(work)} && "
        f"{_sh(COMPOSER)} trials --experiment {_sh(root / 'experiment.yaml')} --csv && "
        f"{_sh(COMPOSER)} export --experiment {_sh(root / 'experiment.yaml')} --out {_sh(out)}"
    )
    result = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=root, capture_output=True, text=True,
                            timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.strip().splitlines()) >= 3  # header + the trials
    assert out.read_text(encoding="utf-8").strip()
    assert {p.name: digest(p) for p in work.iterdir() if p.is_file()} == before


def _sh(path: str | Path) -> str:
    return "'" + str(path).replace("'", "'\\''") + "'"


# -- Also: a blank relevant id ----------------------------------------------------------------------------


def test_a_blank_relevant_id_in_a_list_is_an_error_naming_the_row(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    rows = [{"question": "a?", "relevant_ids": ["d1"]}, {"question": "b?", "relevant_ids": ["d1", ""]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(InputError) as raised:
        load_questions(path)
    message = "id 2 of 2 is blank: remove it or give the id"
    assert str(raised.value) == f"{path}:2 (field 'relevant_ids'): {message}"


def test_a_blank_relevant_ids_field_means_none(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"question": "a?", "relevant_ids": ""}) + "\n", encoding="utf-8")
    (question,) = load_questions(path)
    assert question.relevant_ids == ()
