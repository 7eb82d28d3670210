"""The MLflow writer process, and the spool that keeps what it has not written yet on disk.

Logging a trial to MLflow (a run, its artifacts, a few traces) costs more than a cached trial's search,
so trials hand their ``TrialLog`` to ``StudyTracker.submit``, which pickles it into the spool (atomic
write) and sends its path to a writer process running ``RunWriter``. The trial goes on at once; the
queue is bounded (``MAX_PENDING``), so a study never runs far ahead of what is recorded. The writer
deletes a spool file only once its run is written: logs of a killed study, or of a writer that died, are
written when the study resumes (``Spool.orphans``). Chunk tables are spooled once per index, not per trial.

    <workdir>/spool/<study>/<host>-<pid>-<token>/000012-trial.pkl   (one folder per live tracker, locked)
    <workdir>/spool/<study>/tables/<index key>.pkl
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer.data.ranking import ChunkTable
from composer.errors import ComposerError, InputError
from composer.files import write_atomic
from composer.locks import FileLock
from composer.redact import scrub
from composer.study.record import TrialLog

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import Console

logger = logging.getLogger(__name__)

MAX_PENDING = 32
"""Trial logs submitted but not yet written before ``submit`` waits for the writer."""
TRACE_BACKLOG = 4
"""A trial whose log waited behind more than this many gets no MLflow traces (its traces.jsonl has every
question): traces cost ~30 ms each, and the writer must keep pace with trials that take milliseconds."""
WRITE_ATTEMPTS = 3
TABLES = "tables"
OWNER_LOCK = ".owner.lock"
WRITER_LOCK = ".writer.lock"
"""A spool folder is held by its tracker (``<ident>.owner.lock``) and by the writer serving it
(``<ident>.writer.lock``): after the study dies, its writer may still be writing what it was sent, so a
folder is an orphan only when neither holds it."""


@dataclass(frozen=True)
class WriterSettings:
    """Where and what the writer writes (a RunWriter's arguments) and where the spool lives."""

    tracking_uri: str
    experiment: str
    study_name: str
    spool: Path
    storage: str
    """The study's Optuna storage URL: where its parent run is elected."""
    artifact_root: Path | None = None
    max_traces: int | None = None
    study_params: Mapping[str, Any] | None = None


class Spool:
    """A study's spool folder (see the module docstring); ``owner`` is this process's own subfolder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tables = root / TABLES
        self.tables.mkdir(parents=True, exist_ok=True)
        ident = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self._lock = FileLock.create_held(root / f"{ident}{OWNER_LOCK}")
        self.owner = root / ident
        self.owner.mkdir()
        self._count = 0
        self._tables: set[str] = set()

    def put(self, kind: str, payload: Any) -> Path:
        """Pickle ``payload`` into a new file of this owner; chunk tables go to ``tables/`` by key."""
        self._count += 1
        path = self.owner / f"{self._count:06d}-{kind}.pkl"
        buffer = io.BytesIO()
        _Pickler(buffer, self).dump(payload)
        write_atomic(path, buffer.getvalue())
        return path

    def table(self, table: ChunkTable) -> None:
        if table.key not in self._tables:
            path = self.tables / f"{table.key}.pkl"
            if not path.exists():
                write_atomic(path, pickle.dumps(table, protocol=pickle.HIGHEST_PROTOCOL))
            self._tables.add(table.key)

    def release(self) -> None:
        """Drop this owner's folder if the writer emptied it, then its lock."""
        if not any(self.owner.iterdir()):
            shutil.rmtree(self.owner, ignore_errors=True)
            self._lock.path.unlink(missing_ok=True)
            self.owner.with_name(self.owner.name + WRITER_LOCK).unlink(missing_ok=True)
        self._lock.release()


class _Pickler(pickle.Pickler):
    """Chunk tables by reference (their key): written once under ``tables/``, shared by every trial."""

    def __init__(self, file: io.BytesIO, spool: Spool) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.spool = spool

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, ChunkTable) and obj.key:
            self.spool.table(obj)
            return ("chunk-table", obj.key)
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, tables: Path, cache: dict[str, ChunkTable]) -> None:
        super().__init__(file)
        self.tables = tables
        self.cache = cache

    def persistent_load(self, pid: Any) -> Any:
        kind, key = pid
        if kind != "chunk-table":
            raise pickle.UnpicklingError(f"unknown reference {pid!r}")
        if key not in self.cache:
            self.cache[key] = pickle.loads((self.tables / f"{key}.pkl").read_bytes())
        return self.cache[key]


class Orphans:
    """Spool folders of trackers that are gone, and their files: what a writer writes first. They are
    held (their locks taken) from here until ``release``, after they are written, so two writers starting
    together never both write them. A dead tracker's writer may still be writing what it was sent; it is
    waited for, so two writers never write one trial."""

    def __init__(self, root: Path) -> None:
        self.files: list[Path] = []
        self._held: list[tuple[Path, FileLock, FileLock]] = []
        if not root.is_dir():
            return
        for owner_path in sorted(root.glob(f"*{OWNER_LOCK}")):
            ident = owner_path.name.removesuffix(OWNER_LOCK)
            owner = FileLock(owner_path)
            if not owner.acquire(blocking=False):
                continue  # a live tracker's (its own writer handles it), or another writer adopted it
            writer = FileLock(root / f"{ident}{WRITER_LOCK}")
            writer.acquire()  # at once, or when the dead tracker's writer has written its queue
            folder = root / ident
            self.files.extend(sorted(folder.glob("*.pkl")) if folder.is_dir() else [])
            self._held.append((folder, owner, writer))

    def release(self) -> None:
        """Drop the folders left empty (and their lock files), then let go of every folder."""
        for folder, owner, writer in self._held:
            if not folder.is_dir() or not any(folder.glob("*.pkl")):
                shutil.rmtree(folder, ignore_errors=True)
                owner.path.unlink(missing_ok=True)
                writer.path.unlink(missing_ok=True)
            writer.release()
            owner.release()
        self._held = []


class StudyTracker:
    """The study's side of the MLflow writer: start it, submit logs, wait for it to finish.

    The writer runs as ``python -m composer.study.writer`` (not a fork of the study, which holds models
    and open shards; not multiprocessing's spawn, which re-imports the caller's main module).
    """

    def __init__(self, settings: WriterSettings) -> None:
        self.settings = settings
        self.spool = Spool(settings.spool)
        self.pending = 0
        self.failures: list[str] = []
        self.stopped = False
        self.parent_run_id: str | None = None
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        log = (settings.spool / "writer.log").open("ab")
        # Traces are written before the run is closed; MLflow's usage telemetry would add work to every
        # call and try the network, which a study's writer has no business doing.
        env = {
            **os.environ,
            "MLFLOW_ENABLE_ASYNC_TRACE_LOGGING": "false",
            "MLFLOW_LOGGING_LEVEL": "WARNING",
            "MLFLOW_DISABLE_TELEMETRY": "true",
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "composer.study.writer", str(to_child_r), str(from_child_w)],
            pass_fds=(to_child_r, from_child_w),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,  # Ctrl-C at the terminal stops the study, not what it still has to write
        )
        log.close()
        os.close(to_child_r)
        os.close(from_child_w)
        self._out = Connection(to_child_w, readable=False)
        self._in = Connection(from_child_r, writable=False)
        self._out.send((settings, str(self.spool.owner)))

    def ready(self) -> str:
        """Wait for the writer to open the store; its parent run id. A store that cannot be used is an
        InputError here, before the first trial."""
        while self.parent_run_id is None:
            self._receive()
        return self.parent_run_id

    def submit(self, log: TrialLog) -> None:
        """Queue a trial's log; its config is scrubbed first, as the spool keeps it on disk."""
        config = log.config_dict
        if config is not None:
            log.config = scrub(config)
        self._send("trial", log)

    def lost(self, trials: Sequence[tuple[int, Mapping[str, Any] | None, str]]) -> None:
        """Trials (number, config, reason) whose process died or that never ran: a FAILED run each, unless
        one has a finished run already."""
        self._send("lost", trials)

    def log_study(
        self,
        summary: Mapping[str, Any],
        metrics: Mapping[str, float],
        leaderboard: pd.DataFrame,
        best_config: Mapping[str, Any] | None,
        plots: Mapping[str, str],
    ) -> None:
        self._send("study", (dict(summary), dict(metrics), leaderboard, best_config, dict(plots)))

    def close(self, status: str = "FINISHED", console: Console | None = None) -> None:
        """Let the writer write everything queued, close the parent run, and stop."""
        if not self.stopped:
            if console is not None and self.pending > MAX_PENDING // 4:
                console.print(f"writing {self.pending} trial records to MLflow…", highlight=False)
            try:
                self._out.send(("close", status))
                while self.process.poll() is None or self._in.poll():
                    self._receive(timeout=1.0)
            except (ComposerError, OSError):
                pass  # the writer is gone: what it did not write stays spooled
        self.process.wait()
        self._out.close()
        self._in.close()
        self.spool.release()
        if self.failures:
            for failure in self.failures[:5]:
                logger.warning("MLflow: %s", failure)
            logger.warning(
                "%d records could not be written to MLflow; they stay in %s and are written "
                "when the study resumes",
                len(self.failures),
                self.settings.spool,
            )

    def _send(self, kind: str, payload: Any) -> None:
        """Spool ``payload`` and queue it. A writer that died leaves it spooled (written when the study
        resumes): recording must never fail a trial that ran."""
        path = self.spool.put(kind, payload)
        if self.stopped:
            return
        try:
            self._out.send(("item", str(path), self.pending))
            self.pending += 1
            while self.pending >= MAX_PENDING:
                self._receive()
        except (ComposerError, OSError):
            self._stop()

    def _stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.failures.append(f"the writer stopped; see {self.settings.spool / 'writer.log'}")

    def _receive(self, timeout: float | None = None) -> bool:
        """Handle one message from the writer (within ``timeout`` seconds); False when none came."""
        if timeout is not None and not self._in.poll(timeout):
            return False
        try:
            kind, *rest = self._in.recv()
        except EOFError:
            raise ComposerError(
                f"the MLflow writer stopped; see {self.settings.spool / 'writer.log'}"
            ) from None
        if kind == "ready":
            self.parent_run_id = rest[0]
        elif kind == "error":
            raise InputError(rest[0], field=rest[1])
        elif kind == "done":
            self.pending -= 1
            if rest[0] is not None:
                self.failures.append(rest[0])
        return True


# -- the writer process --------------------------------------------------------------------------------


def serve(inbox: Connection, outbox: Connection) -> None:
    """The writer's loop: open the store, write what dead trackers left, then every item sent."""
    from composer.study.tracking import RunWriter

    settings, owner = inbox.recv()
    writer_lock = FileLock(owner + WRITER_LOCK)
    writer_lock.acquire()  # held until this process exits: its folder is no orphan while it writes
    left = Orphans(settings.spool)  # first: the runs they hold must be known to this writer
    try:
        writer = RunWriter(
            settings.tracking_uri,
            settings.experiment,
            settings.study_name,
            storage=settings.storage,
            artifact_root=settings.artifact_root,
            max_traces=settings.max_traces,
            study_params=settings.study_params,
        )
    except InputError as exc:
        left.release()
        outbox.send(("error", exc.message, exc.field))
        return
    except ComposerError as exc:
        left.release()
        outbox.send(("error", str(exc), None))
        return
    outbox.send(("ready", writer.parent_run_id))
    tables: dict[str, ChunkTable] = {}
    stats = {"mlflow_writer_records": 0.0, "mlflow_writer_seconds": 0.0}
    for path in left.files:
        _write(writer, path, settings.spool / TABLES, tables, backlog=MAX_PENDING)
    left.release()
    while True:
        try:
            message = inbox.recv()
        except EOFError:  # the study's process died: what it queued stays spooled for its resume
            return
        if message[0] == "close":
            writer.close(message[1], stats)
            return
        _, path, backlog = message
        started = time.perf_counter()
        failure = _write(writer, Path(path), settings.spool / TABLES, tables, backlog)
        stats["mlflow_writer_records"] += 1
        stats["mlflow_writer_seconds"] += time.perf_counter() - started
        outbox.send(("done", failure))


def _write(
    writer: Any, path: Path, tables_dir: Path, tables: dict[str, ChunkTable], backlog: int
) -> str | None:
    """Write one spooled record, retrying a store that hiccups; None on success, else why it failed (the
    file then stays for the next run)."""
    try:
        kind, payload = (
            path.stem.split("-", 1)[1],
            _Unpickler(io.BytesIO(path.read_bytes()), tables_dir, tables).load(),
        )
    except FileNotFoundError:
        return None  # written and removed meanwhile
    except Exception as exc:  # from another version, or damaged: set aside, never retried forever
        path.rename(path.with_suffix(".unreadable"))
        return f"{path.name} could not be read ({type(exc).__name__}: {exc}); moved aside"
    for attempt in range(1, WRITE_ATTEMPTS + 1):
        try:
            if kind == "trial":
                writer.write_trial(payload, traces=backlog <= TRACE_BACKLOG)
            elif kind == "lost":
                for number, config, reason in payload:
                    writer.write_lost(number, config, reason)
            elif kind == "study":
                writer.write_study(*payload)
            path.unlink()
            return None
        except Exception as exc:
            if attempt == WRITE_ATTEMPTS:
                return f"{path.name}: {type(exc).__name__}: {exc}"[:2000]
            time.sleep(0.5 * attempt)
    return None


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the study stops on Ctrl-C; its writer finishes writing
    serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))
