"""The MLflow writer process, and the study's handle on it (``StudyTracker``).

Logging a trial to MLflow (a run, its artifacts, a few traces) costs more than a cached trial's search,
so it happens off the trials' path. The runner spools what a trial produced for its run under the trial's
number as it finishes it (``Spool.put_artifacts``); when Optuna has told the trial's end, the study hands
its frozen trial to ``StudyTracker.submit``, which spools it (``composer.tracking.spool``) and sends the
path to a writer process running ``RunWriter`` (``composer.tracking.trial_run``): the writer reads the
trial's ``TrialRecord`` from the frozen trial and its artifacts file, nothing else. The study goes on at
once; the queue is bounded (``MAX_PENDING``), so a study never runs far ahead of what is recorded.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer.data.ranking import ChunkTable
from composer.errors import ComposerError, InputError
from composer.locks import FileLock
from composer.summary import StudyLog, StudySummary
from composer.tracking.spool import (
    RECORD,
    TABLES,
    UNTRACED,
    WRITER_LOCK,
    Orphans,
    Refused,
    Spool,
    artifacts_file,
    read_record,
    refusal,
    set_aside,
)
from composer.tracking.spooled import frozen, trace_leaders, trial_artifacts
from composer.tracking.trial import TrialArtifacts

if TYPE_CHECKING:
    import optuna
    import pandas as pd
    from rich.console import Console

logger = logging.getLogger(__name__)

MAX_PENDING = 32
"""Trial logs submitted but not yet written before ``submit`` waits for the writer."""
TRACE_BACKLOG = 2
"""A trial whose log waited behind more than this many gets no MLflow traces (its traces.jsonl has every
question): a trial's 25 traces cost the writer ~1.5 s, and it must keep pace with trials that take
milliseconds. See ``_traced``."""
WRITE_ATTEMPTS = 3

PAYLOADS: dict[str, Callable[[Any], bool]] = {
    "trial": frozen,
    "lost": lambda payload: isinstance(payload, list) and all(frozen(trial) for trial in payload),
    "study": lambda payload: isinstance(payload, StudyLog),
}
"""What a spool record of each kind holds (``StudyTracker``'s submit, lost and log_study)."""
RESTARTS = 3
"""How often a study starts its writer again after it died, before leaving the rest spooled."""


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
    expectations: Mapping[str, Mapping[str, Any]] | None = None
    """Question id -> its gold (``expected_ids``, ``expected_response``), for traces and question tables."""
    columns: tuple[str, ...] = ()
    """The weighted metrics the study's saved view of the MLflow runs page shows beside the composite."""
    factory: bool = False
    """A factory's study: its trials' settings are the factory's own, no team's prompt is read there."""


class StudyTracker:
    """The study's side of the MLflow writer: start it, submit logs, wait for it to finish.

    The writer runs as ``python -m composer.tracking.writer`` (not a fork of the study, which holds models
    and open shards; not multiprocessing's spawn, which re-imports the caller's main module). A writer that
    dies is started again (up to ``RESTARTS`` times) and sent what it had not written.
    """

    def __init__(self, settings: WriterSettings) -> None:
        self.settings = settings
        self.spool = Spool(settings.spool)
        self.pending = 0
        self.failures: list[str] = []
        self.notes: dict[str, int] = {}
        """Store errors a retry got past (e.g. "database is locked"), and how often: said at the end."""
        self.restarts = 0
        self.submitted: set[int] = set()
        """Trials queued: one handed over again (by the study's Ctrl-C handling) is queued once."""
        self.stopped = False
        self.parent_run_id: str | None = None
        self._start()

    def _start(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        log = (self.settings.spool / "writer.log").open("ab")
        # Traces are written before the run is closed; MLflow's usage telemetry would add work to every
        # call and try the network, which a study's writer has no business doing. The writer does no
        # linear algebra worth a thread pool: OpenBLAS's idle threads would only spin on the study's cores.
        env = {
            **os.environ,
            "OPENBLAS_NUM_THREADS": "1",
            "MLFLOW_ENABLE_ASYNC_TRACE_LOGGING": "false",
            "MLFLOW_LOGGING_LEVEL": "WARNING",
            "MLFLOW_DISABLE_TELEMETRY": "true",
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "composer.tracking.writer", str(to_child_r), str(from_child_w)],
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
        self._out.send((self.settings, str(self.spool.owner)))

    def ready(self) -> str:
        """Wait for the writer to open the store; its parent run id. A store that cannot be used is an
        InputError here, before the first trial."""
        while self.parent_run_id is None:
            self._receive()
        return self.parent_run_id

    def submit(self, trial: optuna.trial.FrozenTrial) -> None:
        """Queue an ended trial (its record holds its config, credentials masked); the runner spooled its
        artifacts file (``Spool.put_artifacts``) before Optuna told its end."""
        if trial.number in self.submitted:
            return
        self.submitted.add(trial.number)
        self._collect()
        self._send("trial", trial)

    def lost(self, trials: Sequence[optuna.trial.FrozenTrial]) -> None:
        """Trials whose process died, each saying why it is taken for dead (``composer.record.lost_trial``):
        a FAILED run each, unless one has a finished run already."""
        self._send("lost", list(trials))

    def log_study(self, summary: StudySummary, leaderboard: pd.DataFrame, plots: Mapping[str, bytes]) -> None:
        """The study's summary, leaderboard and charts, for its parent run."""
        self._send("study", StudyLog(summary, leaderboard, dict(plots)))

    def close(self, status: str = "FINISHED", console: Console | None = None) -> None:
        """Let the writer write everything queued, close the parent run, and stop. A second Ctrl-C while
        it writes leaves it writing on its own (it runs in a session of its own): the rest is spooled."""
        if not self.stopped:
            if console is not None and self.pending > MAX_PENDING // 4:
                console.print(f"writing {self.pending} trial records to MLflow…", highlight=False)
            try:
                self._drain(status)
            except KeyboardInterrupt:
                # Python's exit handlers (MLflow's, ours) must not be cut short by a third Ctrl-C either.
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                logger.warning(
                    "MLflow: stopped waiting for the writer; it finishes in the background (see %s)",
                    self.settings.spool / "writer.log",
                )
                self._out.close()
                self._in.close()
                self.spool.release()
                return
        self.process.wait()
        self._out.close()
        self._in.close()
        self._warn_what_was_left()
        self.spool.release()

    def _drain(self, status: str) -> None:
        """Send "close" and take the writer's answers until it exits; one that died is restarted."""
        while True:
            try:
                self._out.send(("close", status))
                while self.process.poll() is None or self._in.poll():
                    self._receive(timeout=1.0)
            except (ComposerError, OSError):
                pass  # its end of the pipe closed: it exited, or died
            if self.process.wait() == 0 or not self._restart():
                return

    def _warn_what_was_left(self) -> None:
        """Say what the store made the writer retry, and what it could not write (left in the spool)."""
        for note, times in self.notes.items():
            logger.warning("MLflow store: %s (%d times, retried; see %s)", note, times,
                           self.settings.spool / "writer.log")
        left = len(list(self.spool.owner.glob(f"*{RECORD}")))
        for failure in self.failures[:5]:
            logger.warning("MLflow: %s", failure)
        if left:
            logger.warning(
                "%d records could not be written to MLflow; they stay in %s and are written "
                "when the study resumes",
                left,
                self.settings.spool,
            )

    def _send(self, kind: str, payload: Any) -> None:
        """Spool ``payload`` and queue it. A writer that died is restarted; past ``RESTARTS`` it leaves
        the record spooled (written when the study resumes): recording must never fail a trial that ran."""
        path = self.spool.put(kind, payload)
        if self.stopped:
            return
        try:
            self._out.send(("item", str(path), self.pending))
            self.pending += 1
            while self.pending >= MAX_PENDING:
                self._receive()
        except (ComposerError, OSError):
            self._restart()

    def _restart(self) -> bool:
        """Start a new writer after one died and send it every record still spooled; False (and
        stopped) once ``RESTARTS`` is spent or the new one cannot open the store."""
        if self.stopped or self.restarts >= RESTARTS:
            self._stop()
            return False
        self.restarts += 1
        self.process.wait()
        self._out.close()
        self._in.close()
        logger.warning(
            "MLflow: the writer stopped (exit %s; see %s); restarting it",
            self.process.returncode,
            self.settings.spool / "writer.log",
        )
        self.parent_run_id = None
        self._start()
        try:
            self.ready()
            records = sorted(self.spool.owner.glob(f"*{RECORD}"))
            self.pending = 0
            for record in records:
                self._out.send(("item", str(record), self.pending))
                self.pending += 1
                while self.pending >= MAX_PENDING:
                    self._receive()
        except (ComposerError, OSError):
            return self._restart()
        return True

    def _stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.failures.append(f"the writer stopped; see {self.settings.spool / 'writer.log'}")

    def _collect(self) -> None:
        """Take the answers the writer has sent, without waiting: ``pending`` is then what it has yet to
        write, the backlog that decides whether the next trial gets MLflow traces (unread answers used to
        count as waiting, so after the first five trials none got any, however slow the study)."""
        if self.stopped:
            return
        try:
            while self._in.poll():
                self._receive()
        except (ComposerError, OSError):
            pass  # it died: the next send restarts it

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
        elif kind == "warning":  # a spool file it did not read, or a dead study's record it could not write
            logger.warning("MLflow: %s", rest[0])
        elif kind == "done":
            self.pending -= 1
            if rest[0] is not None:
                self.failures.append(rest[0])
            for note in rest[1]:
                if note not in self.notes:  # said at once too: a store that keeps refusing is news now
                    logger.warning("MLflow store: %s (retrying)", note)
                self.notes[note] = self.notes.get(note, 0) + 1
        return True


# -- the writer process --------------------------------------------------------------------------------


def serve(inbox: Connection, outbox: Connection) -> None:
    """The writer's loop: open the store, write what dead trackers left, then every item sent."""
    from composer.tracking.trial_run import RunWriter

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
            expectations=settings.expectations,
            columns=settings.columns,
            factory=settings.factory,
        )
    except InputError as exc:
        left.release()
        outbox.send(("error", exc.raw_message, exc.field))
        return
    except ComposerError as exc:
        left.release()
        outbox.send(("error", str(exc), None))
        return
    outbox.send(("ready", writer.parent_run_id))
    tables: dict[str, ChunkTable] = {}
    stats = {"mlflow_writer_records": 0.0, "mlflow_writer_seconds": 0.0}
    for refused in left.refused:
        outbox.send(("warning", refused))
    for path in left.files:
        failure = _write(writer, path, settings.spool / TABLES, tables, backlog=MAX_PENDING)
        if failure is not None:
            outbox.send(("warning", failure))
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
        notes: list[str] = []
        failure = _write(writer, Path(path), settings.spool / TABLES, tables, backlog, notes)
        stats["mlflow_writer_records"] += 1
        stats["mlflow_writer_seconds"] += time.perf_counter() - started
        outbox.send(("done", failure, notes))


def _write(
    writer: Any,
    path: Path,
    tables_dir: Path,
    tables: dict[str, ChunkTable],
    backlog: int,
    notes: list[str] | None = None,
) -> str | None:
    """Write one spooled record, retrying a store that hiccups (each error retried goes to ``notes``);
    None on success, else why it failed (the file then stays for the next run). A trial's record is its
    frozen trial, written with its artifacts file (``trial_artifacts``); written without its traces, it keeps
    both, its record in ``untraced/``, until the study ends (see ``trace_leaders``). A record that cannot
    be read (damaged, pickled by an older version, another user's) is never retried forever: see
    ``set_aside``."""
    kind = path.name.partition("-")[2].removesuffix(path.suffix)
    try:
        payload = read_record(path, tables_dir, tables)
        valid = PAYLOADS.get(kind)
        if valid is None or not valid(payload):
            raise ValueError(f"not a {kind!r} record")
    except FileNotFoundError:
        return None  # written and removed meanwhile
    except Refused as exc:  # the record, or the chunk table it names
        return set_aside(path, exc.why if exc.path == path else str(exc))
    except Exception as exc:
        return set_aside(path, f"{type(exc).__name__}: {exc}")
    spooled = tables_dir.parent
    artifacts: TrialArtifacts | None = None
    if kind == "trial":
        artifacts = trial_artifacts(writer, path, payload.number, tables_dir, tables)
        if artifacts is None:
            return None
    for attempt in range(1, WRITE_ATTEMPTS + 1):
        try:
            if artifacts is not None:
                traced = _traced(writer, payload, backlog)
                writer.write_trial(payload, artifacts, traces=traced)
                if not traced and artifacts.report is not None and writer.max_traces != 0:
                    untraced = spooled / UNTRACED
                    untraced.mkdir(exist_ok=True)
                    if refusal(untraced) is None:
                        os.replace(path, untraced / f"{payload.number:06d}-trial{RECORD}")
                        return None
                # before the record: a record left without its artifacts file names a written run
                artifacts_file(spooled, payload.number).unlink(missing_ok=True)
            elif kind == "lost":
                for trial in payload:
                    writer.write_lost(trial)
                    # spooled by a runner whose process died before Optuna told the trial's end
                    artifacts_file(spooled, trial.number).unlink(missing_ok=True)
            elif kind == "study":
                writer.write_study(payload.summary, payload.leaderboard, payload.plots)
                trace_leaders(writer, tables_dir, payload.leaderboard, tables)
            path.unlink()
            return None
        except Exception as exc:
            if attempt == WRITE_ATTEMPTS:
                return f"{path.name}: {type(exc).__name__}: {exc}"[:2000]
            if notes is not None:
                notes.append(" ".join(f"{type(exc).__name__}: {exc}".split())[:300])
            time.sleep(0.5 * attempt)
    return None


def _traced(writer: Any, trial: optuna.trial.FrozenTrial, backlog: int) -> bool:
    """Whether a trial's run gets its MLflow traces: when the writer had nothing else to write as it was
    submitted, or a few others (``TRACE_BACKLOG``) and the trial took at least as long as the last traced
    run took to write, so that tracing it keeps pace. A study whose trials outpace the writer gets them
    for its first trial, its slow ones (those that built an index) and, after the study, its leaders
    (``trace_leaders``; AutoRAG's space on ARCD: 6 to 8 of 484); a slower one, for every trial."""
    if backlog == 0:
        return True
    if backlog > TRACE_BACKLOG:
        return False
    took: float | None = writer.traced_seconds
    start, end = trial.datetime_start, trial.datetime_complete
    return took is None or (start is not None and end is not None and (end - start).total_seconds() >= took)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the study stops on Ctrl-C; its writer finishes writing
    serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))
