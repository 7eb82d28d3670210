"""Tables in a PostgreSQL database, shared by every process of every machine of a cluster: the caches'
backend when an experiment sets ``caches:`` (see docs/how-to/cluster.md, "Shared caches").

The same interface as :class:`composer.store.SqliteStore` (``query``, ``execute``, ``execute_many``), so
a cache holds its statements and its checks once for both. Statements are written with SQLite's ``?``
marks and its upsert syntax (``INSERT ... ON CONFLICT DO NOTHING``, which PostgreSQL shares); this store
turns the marks into psycopg2's ``%s``, and returns ``bytea`` values as ``bytes``, as SQLite gives a BLOB.

Each process keeps one SQLAlchemy engine (a small connection pool) per URL, shared by its threads and
stores; a forked child makes its own. Creating the tables races harmlessly between workers
(``despite_schema_race``). The URL's password never reaches a message: ``where`` is the scrubbed URL.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from composer.errors import ConfigError
from composer.redact import scrub_url
from composer.store import despite_schema_race

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

POSTGRES_SCHEMES = ("postgresql://", "postgresql+psycopg2://", "postgres://")
_POOL_SIZE = 4  # connections per process and URL: an index's encoding threads and a trial's LLM calls
_ENGINES: dict[tuple[int, str], Engine] = {}
_REGISTRY = threading.Lock()


def is_postgres_url(url: str) -> bool:
    return url.startswith(POSTGRES_SCHEMES)


def _engine(url: str) -> Engine:
    """This process's engine for ``url`` (one pool per process: a connection must never cross a fork)."""
    from sqlalchemy import create_engine

    slot = (os.getpid(), url)
    with _REGISTRY:
        engine = _ENGINES.get(slot)
        if engine is None:
            driver_url = "postgresql+psycopg2://" + url.split("://", 1)[1]
            engine = _ENGINES[slot] = create_engine(
                driver_url, pool_size=_POOL_SIZE, max_overflow=_POOL_SIZE, pool_pre_ping=True
            )
        return engine


class PostgresStore:
    """Tables with ``schema`` (``CREATE TABLE IF NOT EXISTS`` statements) in the database ``url`` names,
    created on first open; ``url`` is a ``postgresql://`` URL (SQLAlchemy's form)."""

    def __init__(self, url: str, schema: Sequence[str]) -> None:
        if not is_postgres_url(url):
            raise ConfigError(f"caches: {scrub_url(url)} is not a postgresql:// URL", field="caches")
        self.url = url
        self.where = scrub_url(url)
        from sqlalchemy import exc

        try:
            self._engine = _engine(url)
        except (ValueError, exc.ArgumentError) as err:  # a port that is not a number, a broken host
            raise ConfigError(f"caches: {self.where} is not a valid URL ({scrub_url(str(err))[:200]})",
                              field="caches") from None

        def create() -> None:
            with self._engine.begin() as conn:
                for statement in schema:
                    conn.exec_driver_sql(statement)

        try:
            despite_schema_race(create)
        except exc.OperationalError as err:  # a server down, a wrong password or database
            reason = scrub_url(" ".join(str(err.orig).split()))[:300]
            raise ConfigError(f"caches: cannot use {self.where}: {reason}", field="caches") from None

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Every row ``sql`` selects, ``bytea`` values as ``bytes``."""
        with self._engine.connect() as conn:
            rows = conn.exec_driver_sql(_marks(sql), tuple(params)).fetchall()
        return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in rows]

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """One statement, committed at once."""
        with self._engine.begin() as conn:
            conn.exec_driver_sql(_marks(sql), tuple(params))

    def execute_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """``sql`` once per row, in one transaction: every row is stored or none."""
        batch = [tuple(row) for row in rows]
        if not batch:
            return
        with self._engine.begin() as conn:
            conn.exec_driver_sql(_marks(sql), batch)

    def close(self) -> None:
        """Nothing to release: the process's pool outlives a store, as other stores on the URL use it."""


def _marks(sql: str) -> str:
    """SQLite's ``?`` marks as psycopg2's ``%s`` (the caches' statements hold no other ``?`` or ``%``)."""
    return sql.replace("?", "%s")
