"""A local MLflow SQLite store that is whole or absent: created in a temporary file and moved into place.

MLflow creates its tables by running some hundred Alembic migrations on the store's own file, one
statement at a time (SQLite commits each schema change by itself). A full disk, a kill or Ctrl-C
half-way leaves a store at some older revision, maybe with an ``_alembic_tmp_<table>`` copy, that every
later open fails on. So a new store is migrated in ``.<name>.<random>.tmp`` beside it and renamed over
the path only when complete (a temporary file a killed creator left is removed by the next one); a
store found half-made that holds nothing (no runs, no traces) is rebuilt the same way, with a warning;
one that holds runs is never touched: the user is told how to recover it.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import sqlite3
from pathlib import Path

from composer.errors import InputError
from composer.files import NoSpaceError, disk_full_error, temporary_beside
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
    """A complete store at ``file``, migrated in a temporary file first (see the module docstring)."""
    from mlflow.store.db.utils import _initialize_tables, create_sqlalchemy_engine

    file.parent.mkdir(parents=True, exist_ok=True)
    for stale in file.parent.glob(f".{glob.escape(file.name)}.*.tmp*"):  # of a creator killed half-way
        stale.unlink(missing_ok=True)
    fd, name = temporary_beside(file)  # the umask's mode, like the store MLflow itself would create
    os.close(fd)
    tmp = Path(name)
    try:
        engine = create_sqlalchemy_engine(sqlite_url(tmp, mlflow=True))
        try:
            _initialize_tables(engine)  # what MLflow runs on an empty store: its tables, then its migrations
        finally:
            engine.dispose()
        for suffix in ("-journal", "-wal", "-shm"):  # a half-made store's log must never meet the new file
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{file}{suffix}")
        os.replace(tmp, file)
    except BaseException as exc:
        for leftover in (tmp, tmp.with_name(tmp.name + "-journal")):
            leftover.unlink(missing_ok=True)
        if disk_full_error(exc) is not None:
            raise NoSpaceError(file) from exc
        raise


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
