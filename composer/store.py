"""One SQLite file shared by every process and thread of a workdir: what Composer's disk caches build on.

WAL lets readers work while one process writes, and the busy timeout makes concurrent writers (several
study workers) queue instead of failing. A process opens one connection per file, because a SQLite
connection must never cross a fork, and shares it among its threads and its stores on that file behind a
lock.

A damaged file ("file is not a database", "database disk image is malformed": garbage, truncated, torn) is
moved aside to ``<name>.corrupt-<UTC time>`` with its ``-wal`` and ``-shm``, with a warning, and an empty
file takes its place: a cache is rebuilt by being used. Damage is found where finding it costs nothing:
opening reads the header and the schema, and a damaged page fails the statement that reads it, which then
runs again on the new file. ``PRAGMA quick_check`` on every open would cost 40–60 ms per 100 MB (warm;
``benchmarks/bench_damaged_state.py``) and find what the first lookup finds anyway. Bytes changed inside
a stored value go unnoticed either way (SQLite keeps no page checksums); 4 KiB of random bytes anywhere
in a file were found 99 times in 100 (measured on an ARCD embedding cache).

Moving a file that another process has open is not safe: SQLite deletes ``<file>-wal`` by name when the
last connection to a file closes, so a late connection to the moved file would delete the new file's log.
So a process holds a shared lock on ``<file>.lock`` while it has the file open, and the file is moved only
under the exclusive lock: the process that finds the damage closes its connection and waits up to
``RECOVER_WAIT_S`` for the others to do the same (each does on meeting the damage; the first to get the
lock moves the file, the others find it moved and reopen). Should another process keep it open longer,
this one carries on with an empty in-memory store, and a later process moves the file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import sqlite3
import threading
import time
import urllib.parse
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from composer.files import NoSpaceError, disk_full
from composer.locks import FileLock

logger = logging.getLogger(__name__)

RECOVER_WAIT_S = 5.0
"""How long the process that finds a file damaged waits for the other processes to close it."""
_POLL_S = 0.05
_DAMAGED_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB (primary result codes)
_DAMAGED_MESSAGES = ("database disk image is malformed", "file is not a database")

T = TypeVar("T")
Identity = tuple[int, int] | None
"""(device, inode) of a file, None when there is none: tells a moved-aside file from its replacement."""


def damaged(exc: sqlite3.DatabaseError) -> bool:
    """Whether ``exc`` says the file is unreadable (rather than busy, full or a broken constraint)."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python >= 3.11
    if code is not None:
        return code & 0xFF in _DAMAGED_CODES
    return str(exc) in _DAMAGED_MESSAGES


class SqliteStore:
    """A SQLite file with ``schema`` (``CREATE ... IF NOT EXISTS`` statements), created on first open.

    ``page_size`` only takes effect on a new, empty file: existing files keep theirs.
    """

    def __init__(
        self, file: str | Path, schema: Sequence[str], *, busy_timeout_s: float, page_size: int | None = None
    ) -> None:
        self.file = Path(file)
        self.file.parent.mkdir(parents=True, exist_ok=True)
        self._settings = _Settings(tuple(schema), busy_timeout_s, page_size)
        self._db: _Database | None = None
        self._done: weakref.finalize[[_Database], SqliteStore] | None = None  # releases ``_db``, at most once
        self._use(lambda conn: None)  # a bad path fails here, not at the first lookup

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Every row ``sql`` selects."""
        return self._use(lambda conn: conn.execute(sql, params).fetchall())

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """One statement, committed at once."""
        self._use(lambda conn: conn.execute(sql, params))

    def execute_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """``sql`` once per row, in one transaction: every row is stored or none."""
        batch = list(rows)  # kept: the write runs again on a new file when this one proves damaged

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(sql, batch)
            except BaseException:
                if conn.in_transaction:  # SQLite rolls back by itself on some errors (damage, a full disk)
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

        self._use(write)

    def close(self) -> None:
        if self._done is not None:
            self._db, done, self._done = None, self._done, None
            done()

    def _use(self, op: Callable[[sqlite3.Connection], T]) -> T:
        if self._db is None:
            self._db = _database(self.file, self._settings)
            self._done = weakref.finalize(self, _release, self._db)  # a store dropped unclosed, too
        return self._db.run(op)


@dataclass(frozen=True)
class _Settings:
    schema: tuple[str, ...]
    busy_timeout_s: float
    page_size: int | None


class _Database:
    """This process's connection to one file, shared by every store on it (see the module docstring)."""

    def __init__(self, file: Path, settings: _Settings) -> None:
        self.file = file
        self.settings = settings
        self.users = 0
        self.lock = threading.Lock()
        self._guard_path = file.with_name(file.name + ".lock")
        self._conn: sqlite3.Connection | None = None
        self._guard: FileLock | None = None  # held shared while ``_conn`` is open on the file
        self._pid = os.getpid()
        self._opened: Identity = None  # the file ``_conn`` was opened on

    def run(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """``op`` on the connection; run again on a new file when this one proves damaged."""
        with self.lock:
            try:
                return op(self._connection())
            except sqlite3.DatabaseError as exc:
                if disk_full(exc):
                    raise NoSpaceError(self.file) from exc
                if not damaged(exc):
                    raise
                self._recover(exc)
            return op(self._connection())

    def close(self) -> None:
        with self.lock:
            self._disconnect()

    def _connection(self) -> sqlite3.Connection:
        """The open connection (callers hold the lock)."""
        if self._pid != os.getpid():
            # A forked child: the parent's connection and lock stay the parent's. Closing or unlocking
            # them here would break the parent's (a flock lock is shared with a forked child).
            self._conn, self._guard, self._pid = None, None, os.getpid()
        if self._conn is None:
            guard = FileLock(self._guard_path, shared=True)
            guard.acquire()  # waits while another process moves a damaged file aside
            try:
                self._conn = _connect(self.file, self.settings)
            except BaseException:
                guard.release()
                raise
            finally:
                self._opened = _identity(self.file)
            self._guard = guard
        return self._conn

    def _disconnect(self) -> None:
        if self._pid != os.getpid():
            return
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._guard is not None:
            self._guard.release()
            self._guard = None

    def _recover(self, exc: sqlite3.DatabaseError) -> None:
        """Close the damaged file, then move it aside, find that another process did, or fall back to
        memory when other processes keep it open (see the module docstring)."""
        found = self._opened
        self._disconnect()
        lock = FileLock(self._guard_path)
        deadline = time.monotonic() + RECOVER_WAIT_S
        while not lock.acquire(blocking=False):
            if _identity(self.file) != found:
                return  # moved aside by another process: the next use opens the new file
            if time.monotonic() >= deadline:
                self._conn = _connect(":memory:", self.settings)
                logger.warning(
                    "%s is unreadable (%s) and open in another process: this process keeps its entries in "
                    "memory; the file is moved aside and rebuilt by a process that finds it so alone",
                    self.file, exc,
                )
                return
            time.sleep(_POLL_S)
        try:
            if _identity(self.file) == found:
                aside = _move_aside(self.file)
                logger.warning("%s is unreadable (%s): moved aside to %s; it will be rebuilt",
                               self.file, exc, aside.name)
        finally:
            lock.release()


_DATABASES: dict[str, _Database] = {}
_REGISTRY = threading.Lock()


def _database(file: Path, settings: _Settings) -> _Database:
    """This process's connection to ``file``, one more store using it."""
    key = os.path.realpath(file)
    with _REGISTRY:
        db = _DATABASES.get(key)
        if db is None:
            db = _DATABASES[key] = _Database(file, settings)
        elif db.settings.schema != settings.schema:
            raise ValueError(f"{file} is already open with another schema")
        db.users += 1
        return db


def _release(db: _Database) -> None:
    """One store less on ``db``: the last one closes the connection."""
    with _REGISTRY:
        db.users -= 1
        if db.users > 0:
            return
        key = os.path.realpath(db.file)
        if _DATABASES.get(key) is db:
            del _DATABASES[key]
    db.close()


def _connect(file: str | Path, settings: _Settings) -> sqlite3.Connection:
    """A connection in WAL mode with the schema in place: opening reads the header and the schema, so a
    file with a garbage header fails here."""
    conn = sqlite3.connect(
        file, timeout=settings.busy_timeout_s, isolation_level=None, check_same_thread=False
    )
    try:
        if settings.page_size is not None:
            conn.execute(f"PRAGMA page_size={int(settings.page_size)}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        for statement in settings.schema:
            conn.execute(statement)
    except BaseException:
        conn.close()
        raise
    return conn


def _identity(file: Path) -> Identity:
    try:
        stat = os.stat(file)
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino


def _move_aside(file: Path) -> Path:
    """Rename ``file`` with its ``-wal`` and ``-shm`` to ``<name>.corrupt-<UTC time>``, keeping them apart:
    a new file must never meet the old one's log."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    aside = file.with_name(f"{file.name}.corrupt-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = file.with_name(f"{file.name}.corrupt-{stamp}-{n}")
    for suffix in ("-wal", "-shm", ""):
        with contextlib.suppress(FileNotFoundError):
            os.replace(f"{file}{suffix}", f"{aside}{suffix}")
    return aside


_WAL_FILES: set[str] = set()


def use_wal(database: str | Path) -> None:
    """Open the SQLite database ``database`` in WAL mode with ``synchronous=NORMAL`` whenever SQLAlchemy
    connects to it in this process (Optuna's storage), as the caches above: a commit then costs
    microseconds instead of an fsync (3.7 ms here), and a study commits several times per trial; readers
    never block the writer. A crash of the process loses nothing committed; only a power cut may lose the
    last transactions. The MLflow writer puts its local store in WAL mode too (a trial's run is ~10
    commits): the MLflow UI and notebooks read it through SQLite, which is safe; a process that also
    opens the file some other way and closes it drops its SQLite locks on it (POSIX locks are
    per-process), after which another process may delete the WAL under its open connections, so read
    the file's bytes from another process. A full disk is then raised as a NoSpaceError naming
    the file of whichever SQLite database SQLAlchemy writes in this process (MLflow's too): SQLite's own
    error names none."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    if not _WAL_FILES:
        event.listen(Engine, "connect", _wal_on_connect)
        event.listen(Engine, "handle_error", _name_the_full_disk)
    _WAL_FILES.add(os.path.realpath(database))


def _name_the_full_disk(context: Any) -> None:
    engine = context.engine
    if engine is not None and engine.dialect.name == "sqlite" and disk_full(context.original_exception):
        raise NoSpaceError(engine.url.database or "an in-memory database") from context.original_exception


def _wal_on_connect(dbapi_connection: Any, _record: Any) -> None:
    if not isinstance(dbapi_connection, sqlite3.Connection):
        return
    cursor = dbapi_connection.cursor()
    try:
        files = {os.path.realpath(row[2]) for row in cursor.execute("PRAGMA database_list") if row[2]}
        if files & _WAL_FILES:
            cursor.execute("PRAGMA journal_mode=WAL").fetchall()
            cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


NEW_FILE_WAIT_S = 5.0
"""How long an empty store file may be someone's store being created."""


def sqlite_problem(path: str | Path) -> str | None:
    """Why the SQLite file ``path`` cannot be used as it is ("empty (0 bytes)", "not a SQLite database",
    "damaged (...)"); None when it is sound or does not exist. ``PRAGMA quick_check`` reads every page:
    fine for a study's stores (tens of MB, well under a second), not for a cache opened by every
    command."""
    file = Path(path)
    deadline = time.monotonic() + NEW_FILE_WAIT_S
    while True:
        try:
            stat = file.stat()
        except FileNotFoundError:
            return None
        if stat.st_size > 0:
            break
        # Another worker may have just created it (SQLite writes its header with the first table):
        # only a file left empty is a lost store.
        if time.time() - stat.st_mtime > NEW_FILE_WAIT_S or time.monotonic() > deadline:
            return "empty (0 bytes)"
        time.sleep(0.1)
    # Only through SQLite: closing any other descriptor of the file would drop every POSIX lock this
    # process holds on it, and another process would then delete the WAL under our open connections.
    try:
        conn = sqlite3.connect(file, timeout=1.0)
        try:
            rows = conn.execute("PRAGMA quick_check").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        return f"damaged ({exc})" if damaged(exc) else None  # busy: its opener waits or says so
    if rows != [("ok",)]:
        return "damaged (" + "; ".join(str(r[0]) for r in rows[:3]) + ")"
    return None


_URL_SPECIAL = re.compile(r"[%?#]")
_SQLITE_SCHEME = re.compile(r"sqlite(\+\w+)?:")


def sqlite_url(path: str | Path, *, mlflow: bool = False) -> str:
    """The ``sqlite:///`` URL of the file ``path`` (made absolute), built so that every reader of it opens
    that file. SQLAlchemy (so Optuna and MLflow) decodes ``%XX`` in a URL's path and ends it at ``?``, and
    other URL parsers end it at ``#``: a work dir ``w%41x?mode=ro#frag`` would open ``./wAx``. So those
    three are escaped. MLflow also creates the parent folder of a ``sqlite:///`` URL from its text, not
    decoded, beside the real one: with ``mlflow`` such a URL names the driver (``sqlite+pysqlite:///``,
    the same driver SQLAlchemy uses by default), which MLflow leaves to SQLAlchemy."""
    text = os.path.abspath(path)
    escaped = _URL_SPECIAL.sub(lambda m: f"%{ord(m.group()):02X}", text)
    scheme = "sqlite+pysqlite" if mlflow and escaped != text else "sqlite"
    return f"{scheme}:///{escaped}"


def connect_read_only(file: str | Path) -> sqlite3.Connection:
    """A connection that never writes to ``file`` or beside it, for reading a store in a folder this
    process cannot write (a read-only mount, another user's work dir). SQLite reads a WAL file only
    through its ``-shm`` index, which it cannot create there; with no ``-wal`` beside the file no
    process is writing it (Composer's Optuna storages are WAL files, and a writer keeps its ``-wal``), so
    it is opened as immutable, without one."""
    path = os.path.abspath(file)
    uri = "file:" + urllib.parse.quote(path) + "?mode=ro"
    if not os.path.exists(path + "-wal"):
        uri += "&immutable=1"
    return sqlite3.connect(uri, uri=True, check_same_thread=False)


def sqlite_file(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL (its query string, ``?timeout=30``, left out; ``%XX`` decoded);
    None for any other URL and for an in-memory database."""
    if not _SQLITE_SCHEME.match(url):
        return None
    from sqlalchemy.engine import make_url

    database = make_url(url).database
    return None if not database or database == ":memory:" else Path(database)


SCHEMA_ATTEMPTS = 6
"""Tries at opening a storage whose fresh schema other workers may be creating at the same moment."""


def despite_schema_race(open_storage: Callable[[], T]) -> T:
    """Open a storage, again if another worker was creating the same fresh schema at that moment.

    Optuna creates its tables and version rows on first open, and the MLflow parent-run election its
    table (``composer.tracking.parent``); two workers doing it at once collide (a table, type or row
    that appeared in between). Each step is idempotent, so a retry finds the schema complete. Errors
    of any other kind (a wrong URL, a server down) are raised at once.
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
