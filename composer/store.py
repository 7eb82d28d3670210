"""One SQLite file shared by every process and thread of a workdir: what Composer's disk caches build on.

WAL lets readers work while one process writes, and the busy timeout makes concurrent writers (several
study workers) queue instead of failing. The connection is opened per process, because a SQLite
connection must never cross a fork, and shared by the process's threads behind a lock.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


class SqliteStore:
    """A SQLite file with ``schema`` (``CREATE ... IF NOT EXISTS`` statements), created on first open.

    ``page_size`` only takes effect on a new, empty file: existing files keep theirs.
    """

    def __init__(
        self, file: str | Path, schema: Sequence[str], *, busy_timeout_s: float, page_size: int | None = None
    ) -> None:
        self.file = Path(file)
        self.file.parent.mkdir(parents=True, exist_ok=True)
        self._schema = tuple(schema)
        self._busy_timeout_s = busy_timeout_s
        self._page_size = page_size
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        with self._lock:
            self._connection()  # a bad path fails here, not at the first lookup

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Every row ``sql`` selects."""
        with self._lock:
            return self._connection().execute(sql, params).fetchall()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """One statement, committed at once."""
        with self._lock:
            self._connection().execute(sql, params)

    def execute_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """``sql`` once per row, in one transaction: every row is stored or none."""
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(sql, rows)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def _connection(self) -> sqlite3.Connection:
        """This process's connection (callers hold the lock)."""
        if self._conn is None or self._pid != os.getpid():
            conn = sqlite3.connect(
                self.file, timeout=self._busy_timeout_s, isolation_level=None, check_same_thread=False
            )
            if self._page_size is not None:
                conn.execute(f"PRAGMA page_size={int(self._page_size)}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            for statement in self._schema:
                conn.execute(statement)
            self._conn, self._pid = conn, os.getpid()
        return self._conn
