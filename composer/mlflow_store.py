"""A local MLflow SQLite store that is whole or absent: created in a temporary file and moved into place.

MLflow creates its tables by running some hundred Alembic migrations on the store's own file, one
statement at a time (SQLite commits each schema change by itself). A full disk, a kill or Ctrl-C
half-way leaves a store at some older revision, maybe with an ``_alembic_tmp_<table>`` copy, that every
later open fails on. So a new store is migrated in ``.<name>.<random>.tmp`` beside it and renamed over
the path only when complete (a temporary file a killed creator left is removed by the next one). The
migrated empty store is kept once per MLflow version in the user's cache folder and copied for each new
store (a file copy instead of ~3 s of migrations, which every new study's writer waited for); a
store found half-made that holds nothing (no runs, no traces) is rebuilt the same way, with a warning;
one that holds runs is never touched: the user is told how to recover it.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import shutil
import sqlite3
from pathlib import Path

from composer.errors import InputError
from composer.files import NoSpaceError, default_cache_dir, disk_full_error, temporary_beside
from composer.store import sqlite_file, sqlite_url

logger = logging.getLogger(__name__)

_TMP_TABLE = "_alembic_tmp_"


def prepare_mlflow_store(tracking_uri: str) -> None:
    """Create the local SQLite store of ``tracking_uri`` if it is missing or empty, rebuild it if it was
    left half-made holding nothing; any other URI, or a whole store, is left to MLflow. Callers hold the
    store's lock: two processes must not create one store together."""
    file = sqlite_file(tracking_uri)
    if file is None:
        return
    if not file.exists() or file.stat().st_size == 0:
        _create(file)
        return
    tables, revision, held = _inspect(file)
    if not tables:
        _create(file)
        return
    if "experiments" not in tables:  # MLflow's first table: without it this is another program's database
        raise InputError(
            f"{file} is not an MLflow store (it holds the tables {', '.join(sorted(tables)[:5])}): point "
            "mlflow.tracking_uri at an MLflow store or at a new file",
            field="mlflow.tracking_uri",
        )
    why = _half_made(tables, revision)
    if why is None:
        return
    if held:
        raise InputError(
            f"the MLflow store {file} was left half-made ({why}) and holds {held} runs and traces: back it "
            "up, then finish it with `mlflow db upgrade <its URI>`; or move it aside and log this study to "
            "another MLflow experiment (mlflow.experiment), its earlier runs then left out",
            field="mlflow.tracking_uri",
        )
    _create(file)
    logger.warning("the MLflow store %s was left half-made (%s) and held no runs: rebuilt", file, why)


def _create(file: Path) -> None:
    """A complete store at ``file``: a copy of this MLflow's empty store (``_template``), else migrated in
    a temporary file first (see the module docstring)."""
    file.parent.mkdir(parents=True, exist_ok=True)
    for stale in file.parent.glob(f".{glob.escape(file.name)}.*.tmp*"):  # of a creator killed half-way
        stale.unlink(missing_ok=True)
    fd, name = temporary_beside(file)  # the umask's mode, like the store MLflow itself would create
    os.close(fd)
    tmp = Path(name)
    try:
        template = _template()
        if template is None or not _copied(template, tmp):
            _migrate(tmp)
        for suffix in ("-journal", "-wal", "-shm"):  # a half-made store's log must never meet the new file
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{file}{suffix}")
        os.replace(tmp, file)
    except BaseException as exc:
        for leftover in (tmp, tmp.with_name(tmp.name + "-journal")):
            leftover.unlink(missing_ok=True)
        if (fault := disk_full_error(exc)) is not None:
            raise NoSpaceError(file, fault.reason) from exc
        raise


def _migrate(file: Path) -> None:
    """MLflow's tables in the empty SQLite file ``file``: what MLflow runs on an empty store (its tables,
    then its migrations), ~2-4 s on two cores, most of it Alembic loading and committing each step."""
    from mlflow.store.db.utils import _initialize_tables, create_sqlalchemy_engine

    engine = create_sqlalchemy_engine(sqlite_url(file, mlflow=True))
    try:
        _initialize_tables(engine)
    finally:
        engine.dispose()


def _template() -> Path | None:
    """This MLflow version's empty store, migrated once and kept in the user's cache folder
    (``mlflow-stores/``), so a new study's store is a file copy, not a hundred migrations again; None
    when the folder cannot hold it (the store is then migrated in place)."""
    from mlflow.version import VERSION

    path = default_cache_dir() / "mlflow-stores" / f"empty-{VERSION}.db"
    if path.is_file():
        return path
    tmp: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = temporary_beside(path)
        os.close(fd)
        tmp = Path(name)
        _migrate(tmp)
        os.replace(tmp, path)  # whole or absent: another process making it too only replaces a whole one
    except Exception as exc:  # a cache that cannot be written costs time, not the study
        logger.debug("no empty MLflow store kept in %s: %s", path.parent, exc)
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        return None
    return path


def _copied(template: Path, file: Path) -> bool:
    """Copy ``template`` to ``file``; False (``file`` left to be migrated) when the template is no whole
    store of this MLflow, which then is removed, to be made again."""
    shutil.copyfile(template, file)
    try:
        tables, revision, held = _inspect(file)
        whole = "experiments" in tables and not held and _half_made(tables, revision) is None
    except sqlite3.DatabaseError:
        whole = False
    if not whole:
        logger.debug("the empty MLflow store %s is damaged: made again", template)
        template.unlink(missing_ok=True)
        file.write_bytes(b"")
    return whole


def _inspect(file: Path) -> tuple[set[str], str | None, int]:
    """The store's table names, its Alembic revision (None when it has none) and how many runs and
    traces it holds (tables a half-made store lacks count 0)."""
    conn = sqlite3.connect(file, timeout=30.0)
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        row = None
        if "alembic_version" in tables:
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        held = sum(
            int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
            for table in ("runs", "trace_info")
            if table in tables
        )
    finally:
        conn.close()
    return tables, None if row is None else str(row[0]), held


def _half_made(tables: set[str], revision: str | None) -> str | None:
    """Why a store is not one MLflow finished creating (a leftover migration table, no schema revision,
    a revision older than this MLflow's latest); None when it is whole, or newer than this MLflow knows
    (MLflow itself says so)."""
    leftovers = sorted(t for t in tables if t.startswith(_TMP_TABLE))
    if leftovers:
        return f"migration table {', '.join(leftovers)} left over"
    if revision is None:
        return "no schema revision recorded"
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config, _get_latest_schema_revision

    if revision == _get_latest_schema_revision():
        return None
    known = {r.revision for r in ScriptDirectory.from_config(_get_alembic_config("")).walk_revisions()}
    return f"stopped at migration {revision}" if revision in known else None
