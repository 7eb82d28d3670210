"""The study's MLflow parent run, elected through the Optuna storage: one parent for every worker.

Here, beside the writer that uses it (``composer.tracking.study_run``), not with the study: the election is
MLflow's bookkeeping; it only borrows the study's storage database for its transactions.
"""

from __future__ import annotations

import hashlib
import json

from composer.store import despite_schema_race, sqlite_file, use_wal


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
        despite_schema_race(lambda: self._table.create(self._engine, checkfirst=True))

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
