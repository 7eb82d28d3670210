"""A spooled trial as the MLflow writer reads it back: its record (the frozen trial) with the artifacts file
the runner spooled under its number, and the records of trials written without their traces (``untraced/``),
whose leaders get their traces when the study ends.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer.data.ranking import ChunkTable
from composer.tracking.spool import (
    RECORD,
    UNTRACED,
    Refused,
    artifacts_file,
    read_record,
    refusal,
    set_aside,
)
from composer.tracking.trial import TrialArtifacts

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)


def frozen(payload: Any) -> bool:
    """Whether ``payload`` is Optuna's frozen trial (known by name: optuna is not imported to check)."""
    return type(payload).__name__ == "FrozenTrial"

LEADERS = 2
"""The study's leading trials (winner, runner-up) whose MLflow traces are written after the study if the
writer was too far behind to write them with their runs."""


def trial_artifacts(
    writer: Any, path: Path, number: int, tables_dir: Path, tables: dict[str, ChunkTable]
) -> TrialArtifacts | None:
    """The artifacts file the runner spooled for the trial whose record is ``path``; None when the trial's
    run was written already (a writer died between deleting the two files: the record is dropped). Without
    it (never written, gone, or damaged: set aside) the run is still written from the record, which holds
    the trial's state, parameters and metrics, with a warning: recording loses the report's files, never
    the trial."""
    found = artifacts_file(tables_dir.parent, number)
    try:
        artifacts = read_record(found, tables_dir, tables)
        if not isinstance(artifacts, TrialArtifacts):
            raise ValueError("not a trial's artifacts")
        return artifacts
    except Refused as exc:  # the file, or the chunk table it names
        why = str(exc)
    except FileNotFoundError:
        if not found.exists():
            run = getattr(writer, "logged", {}).get(number)
            if run is not None and run[1] != "RUNNING":
                path.unlink(missing_ok=True)
                return None
            why = f"its artifacts file {found} is missing"
        else:
            why = f"its artifacts file {found} names a chunk table that is gone"
    except Exception as exc:
        why = set_aside(found, f"{type(exc).__name__}: {exc}")
    logger.warning("MLflow: trial %d: %s: its run is written from its record alone", number, why)
    return TrialArtifacts()


def trace_leaders(
    writer: Any, tables_dir: Path, board: pd.DataFrame, tables: dict[str, ChunkTable]
) -> None:
    """Write the traces the leaderboard's winner and runner-up went without, then drop the untraced
    records (and artifacts files) of the trials it ranks below them: those stay behind (later trials only
    push them down); a trial it does not list (another worker's, finished since) keeps its record. A record
    is claimed by renaming it, so two workers ending together write a leader's traces once. Records that
    are not the user's own are left alone."""
    folder = tables_dir.parent / UNTRACED
    if not folder.is_dir() or refusal(folder) is not None:
        return
    complete = [int(n) for n in board.loc[board["state"] == "COMPLETE", "trial"]]
    numbers = complete[:LEADERS]
    for number in numbers:
        path = folder / f"{number:06d}-trial{RECORD}"
        claimed = path.with_name(f"{path.name}.{os.getpid()}")
        try:
            if refusal(path) is not None:
                continue
            path.rename(claimed)
        except FileNotFoundError:
            continue  # traced with its run, or by another worker
        artifacts = artifacts_file(tables_dir.parent, number)
        try:
            trial = read_record(claimed, tables_dir, tables)
            found = read_record(artifacts, tables_dir, tables)
            if not frozen(trial) or not isinstance(found, TrialArtifacts):
                raise ValueError("not a trial's record and artifacts")
        except Exception as exc:  # damaged or gone: its run is written; its traces stay in traces.jsonl
            logger.warning("MLflow: %s", set_aside(claimed, f"{type(exc).__name__}: {exc}"))
            continue
        writer.write_late_traces(trial, found, "winner" if number == numbers[0] else "runner-up")
        artifacts.unlink(missing_ok=True)
        claimed.unlink()
    behind = {int(n) for n in board["trial"]} - set(numbers)
    for path in folder.glob(f"*-trial{RECORD}"):
        prefix = path.name.split("-", 1)[0]
        if prefix.isdigit() and int(prefix) in behind and refusal(path) is None:
            artifacts_file(tables_dir.parent, int(prefix)).unlink(missing_ok=True)
            path.unlink(missing_ok=True)
