"""Opening a study's Optuna storage: an RDB URL (SQLite in the workdir by default, PostgreSQL for several
machines), its schema created race-free, trials of dead processes failed by heartbeat and retried."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import sqlite3
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from composer.errors import ConfigError, InputError, option
from composer.redact import scrub_url

if TYPE_CHECKING:
    import optuna

    from composer.study.experiment import ExperimentConfig
    from composer.study.space import SearchSpace

logger = logging.getLogger(__name__)

SCHEMA_ATTEMPTS = 6
"""Tries at opening a storage whose fresh schema other workers may be creating at the same moment."""

T = TypeVar("T")


def make_storage(
    url: str, heartbeat_interval: int | None = None, *, read_only: bool = False
) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage; with a heartbeat, trials of dead processes are failed and retried.

    A URL that cannot be opened (malformed, no driver for it, a server that is down or refuses us) is
    an InputError naming it, its password masked; so is a SQLite file that is another program's
    database (an MLflow store), which is only read, never given Optuna's tables, and a schema Optuna
    cannot use. ``read_only`` opens a SQLite file without writing to it or beside it.
    """
    from optuna.exceptions import ExperimentalWarning
    from optuna.storages import RDBStorage
    from sqlalchemy import exc

    from composer.store import connect_read_only, sqlite_file, sqlite_problem, use_wal
    from composer.study._workers import StaleTrials

    file = sqlite_file(url)
    options: dict[str, Any] = {}
    if file is not None:
        problem = sqlite_problem(file)
        if problem is not None:  # Optuna would start afresh on an empty file, and crash on a damaged one
            raise InputError(
                f"the Optuna storage {file} is {problem}: the studies it held cannot be read. Restore it "
                "from a backup, or move it aside to start a new storage (the MLflow runs of earlier "
                "trials stay where they are)",
                field="storage",
            )
        _refuse_foreign(file)
        if read_only:
            options["engine_kwargs"] = {"creator": lambda: connect_read_only(file)}
        else:
            file.parent.mkdir(parents=True, exist_ok=True)
            use_wal(file)
    try:
        if heartbeat_interval is None:
            return _despite_schema_race(lambda: RDBStorage(url, **options))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            return _despite_schema_race(
                lambda: RDBStorage(
                    url,
                    heartbeat_interval=heartbeat_interval,
                    grace_period=2 * heartbeat_interval,
                    heartbeat_stale_trial_callback=StaleTrials(),
                )
            )
    except RuntimeError as err:  # Optuna's schema check: a storage of an older or a newer Optuna
        if "table schema" not in str(err):
            raise
        raise InputError(_schema_mismatch(url), field="storage") from None
    except (exc.ArgumentError, exc.OperationalError, ImportError) as err:
        if isinstance(err, exc.OperationalError):
            reason = str(err.orig)
        elif isinstance(err, ImportError):
            reason = f"no database driver for it ({err.__cause__ or err})"
        else:
            reason = str(err)
        reason = scrub_url(" ".join(reason.split()))
        raise InputError(
            f"cannot open the Optuna storage {scrub_url(url)}: {reason}", field="storage"
        ) from None


def _refuse_foreign(file: Path) -> None:
    """A SQLite file with tables but none of Optuna's is another program's database (``--storage`` given
    the MLflow store, say): read, never written."""
    from composer.store import connect_read_only

    if not file.exists() or file.stat().st_size == 0:
        return
    try:
        conn = connect_read_only(file)
        try:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return  # busy or unopenable here: opening it says why
    if not tables or {"studies", "version_info"} & tables:
        return
    kind = "an MLflow store" if {"experiments", "runs"} <= tables else "another program's database"
    raise InputError(
        f"{file} is {kind}, not an Optuna storage: give --storage (or storage:) an Optuna storage, or a "
        "new file",
        field="storage",
    )


def _schema_mismatch(url: str) -> str:
    """Why Optuna refused the storage's schema, in words: its own message says "no longer compatible"
    and "set up by" this very version when the storage comes from a newer Optuna."""
    import optuna
    import sqlalchemy as sa
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError
    from sqlalchemy.pool import NullPool

    shown = scrub_url(url)
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            revision = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
            version = conn.execute(sa.text("SELECT library_version FROM version_info")).scalar()
    except sa.exc.DBAPIError:
        revision = version = None
    finally:
        engine.dispose()
    config = Config()
    config.set_main_option("script_location", str(Path(optuna.storages.__file__).parent / "_rdb" / "alembic"))
    try:
        ScriptDirectory.from_config(config).get_revision(str(revision))
        known = revision is not None
    except CommandError:
        known = False
    if not known:
        return (f"the Optuna storage {shown} was written by a newer Optuna (schema {revision}, optuna "
                f"{version}) than this one ({optuna.__version__}): upgrade Optuna (pip install -U optuna) "
                "or give another --storage")
    return (f"the Optuna storage {shown} has an older schema ({revision}) than optuna {optuna.__version__} "
            f"uses: back it up, then run `optuna storage upgrade --storage {shown}`")


def _despite_schema_race(open_storage: Callable[[], T]) -> T:
    """Open a storage, again if another worker was creating the same fresh schema at that moment.

    Optuna creates its tables and version rows on first open; two workers doing it at once collide
    (a table, type or row that appeared in between). Each step is idempotent, so a retry finds the
    schema complete. Errors of any other kind (a wrong URL, a server down) are raised at once.
    """
    from sqlalchemy import exc

    attempt = 1
    while True:
        try:
            return open_storage()
        except (exc.IntegrityError, exc.ProgrammingError, exc.OperationalError) as err:
            message = str(err.orig).lower()
            racing = isinstance(err, exc.IntegrityError) or "already exists" in message or "locked" in message
            if not racing or attempt == SCHEMA_ATTEMPTS:
                raise
            logger.debug("storage schema busy (attempt %d): %s", attempt, message)
            time.sleep(0.1 * attempt + 0.2 * random.random())
            attempt += 1


def open_study(exp: ExperimentConfig, space: SearchSpace, *, name: str | None = None) -> optuna.Study:
    """Create the study, or load it (same storage and name) to continue where it stopped."""
    import optuna

    from composer.study._sampling import make_pruner, study_sampler

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    failures = logging.getLogger("optuna.study._optimize")  # where Optuna reports a failed trial
    if not any(isinstance(f, _FailedTrialsOnceInTheLiveView) for f in failures.filters):
        failures.addFilter(_FailedTrialsOnceInTheLiveView())
    study_name = name or exp.name
    storage = make_storage(exp.storage_url, exp.heartbeat_interval)
    directions = ["maximize", *exp.secondary_directions()]
    # Workers creating a new study together: Optuna turns the loser's insert into loading the winner's.
    study = optuna.create_study(
        storage=storage,
        sampler=study_sampler(exp, space),
        pruner=make_pruner(exp.pruner),
        study_name=study_name,
        directions=directions,
        load_if_exists=True,
    )
    if [d.name.lower() for d in study.directions] != directions:
        raise ConfigError(
            f"study '{study_name}' exists with other objectives "
            f"({[d.name.lower() for d in study.directions]}); choose another {option('study_name')}",
            field="objective",
        )
    from composer.study._compat import check_unchanged

    check_unchanged(study, storage, exp.objective, space)  # another objective or space: refused, exit 2
    return study


def load_study(name: str, storage_url: str) -> optuna.Study:
    """An existing study, for reading (`composer trials`, `composer export`)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    shown = scrub_url(storage_url)
    from composer.store import sqlite_file

    file = sqlite_file(storage_url)
    if file is not None and not file.exists():
        raise InputError(f"no study storage at {shown} (give --experiment or --storage)")
    # Reading needs no write access: a work dir on a read-only mount, or another user's, is opened so.
    read_only = file is not None and not (os.access(file, os.W_OK) and os.access(file.parent, os.W_OK))
    storage = make_storage(storage_url, read_only=read_only)
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        names = [s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)]
        raise InputError(
            f"no study '{name}' in {shown} (studies there: {', '.join(names) or 'none'})"
        ) from None


class _FailedTrialsOnceInTheLiveView(logging.Filter):
    """Optuna logs each failed trial in two warnings, with its traceback; the live view already prints
    one line per failed trial, with its error. They pass (traceback and all) only with ``--debug``."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith("Trial "):
            return True
        return logging.getLogger("composer").isEnabledFor(logging.DEBUG)


class ParentClaims:
    """The study's MLflow parent run, elected through the Optuna storage's transactions.

    Workers that find no parent each create a candidate run and insert it into a table of the Optuna
    storage keyed by (study, MLflow experiment): the primary key admits the first insert alone, so every
    worker reads back the same winner and the losers delete their candidates. No clock, no wait, on
    SQLite and PostgreSQL alike. The row outlives the MLflow store: a store emptied or replaced under a
    study that has logged to it is noticed (``RunWriter``) instead of restarted. The store's URI is not
    part of the key, so a study directory moved elsewhere (its default store's path with it) continues.
    """

    TABLE = "composer_parent_runs"

    def __init__(self, storage_url: str, study: str, experiment: str) -> None:
        import sqlalchemy as sa
        from sqlalchemy.pool import NullPool

        from composer.store import sqlite_file, use_wal

        if (file := sqlite_file(storage_url)) is not None:
            use_wal(file)
        self.key = hashlib.sha256(json.dumps([study, experiment]).encode()).hexdigest()
        self._engine = sa.create_engine(storage_url, poolclass=NullPool)
        self._table = sa.Table(
            self.TABLE,
            sa.MetaData(),
            sa.Column("claim_key", sa.String(64), primary_key=True),
            sa.Column("study", sa.String(512), nullable=False),
            sa.Column("run_id", sa.String(64), nullable=False),
        )
        self._study = study[:512]
        _despite_schema_race(lambda: self._table.create(self._engine, checkfirst=True))

    def get(self) -> str | None:
        """The elected parent run id, None before any election."""
        import sqlalchemy as sa

        with self._engine.connect() as conn:
            row = conn.execute(
                sa.select(self._table.c.run_id).where(self._table.c.claim_key == self.key)
            ).first()
        return None if row is None else str(row[0])

    def study_has_trials(self) -> bool:
        """Whether the study has any trial in the storage (False without Optuna's tables)."""
        import sqlalchemy as sa

        query = sa.text(
            "SELECT 1 FROM trials JOIN studies ON trials.study_id = studies.study_id "
            "WHERE studies.study_name = :name LIMIT 1"
        )
        try:
            with self._engine.connect() as conn:
                return conn.execute(query, {"name": self._study}).first() is not None
        except sa.exc.DBAPIError:
            return False

    def claim(self, run_id: str) -> str:
        """Elect ``run_id`` unless another worker's run was elected first; the winner either way."""
        import sqlalchemy as sa

        try:
            with self._engine.begin() as conn:
                row = {"claim_key": self.key, "study": self._study, "run_id": run_id}
                conn.execute(sa.insert(self._table).values(**row))
        except sa.exc.IntegrityError:
            pass  # another worker's insert came first
        winner = self.get()
        assert winner is not None
        return winner

    def close(self) -> None:
        self._engine.dispose()
