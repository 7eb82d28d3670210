"""Opening a study's Optuna storage: an RDB URL (SQLite in the workdir by default, PostgreSQL for several
machines), its schema created race-free, trials of dead processes failed by heartbeat and retried."""

from __future__ import annotations

import logging
import os
import sqlite3
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer.errors import ConfigError, InputError, option
from composer.redact import scrub_url
from composer.store import despite_schema_race

if TYPE_CHECKING:
    import optuna

    from composer.study.experiment import ExperimentConfig
    from composer.study.space import SearchSpace

logger = logging.getLogger(__name__)

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
            return despite_schema_race(lambda: RDBStorage(url, **options))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            return despite_schema_race(
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
            f"({[d.name.lower() for d in study.directions]}); choose another name "
            f"({option('study_name', 'NEW')})",
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
