"""Recording never decides a trial's fate: an artifacts file the runner cannot write leaves the trial as it
ended, and a missing or damaged one still gives the trial its MLflow run, from its record alone."""

from __future__ import annotations

import errno
import logging
from pathlib import Path
from typing import Any

import optuna
import pytest
from ended_trials import scripted_runner
from writer_logs import runs_by_trial, spool_trial, trial_log, writer_for

from composer.data.ranking import ChunkTable
from composer.tracking.spool import Spool, artifacts_file
from composer.tracking.trial import TrialArtifacts
from composer.tracking.writer import _write


class FullSpool(Spool):
    """A spool on a full disk: the artifacts file cannot be written."""

    def put_artifacts(self, number: int, artifacts: TrialArtifacts) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("outcome", ["complete", "pruned"])
def test_a_spool_that_cannot_be_written_leaves_the_trial_as_it_ended(
    tmp_path: Path, outcome: str, caplog: pytest.LogCaptureFixture
) -> None:
    def run(trial: Any) -> float:
        if outcome == "pruned":
            raise optuna.TrialPruned()
        return 0.75

    study = optuna.create_study()
    with caplog.at_level(logging.WARNING, logger="composer.study.runner"):
        study.optimize(scripted_runner(run, None, FullSpool(tmp_path / "spool")), n_trials=1)
    [trial] = study.trials
    expected = optuna.trial.TrialState.COMPLETE if outcome == "complete" else optuna.trial.TrialState.PRUNED
    assert trial.state == expected
    assert "could not be spooled" in caplog.text and "No space left" in caplog.text


@pytest.mark.parametrize("damage", ["missing", "garbage"])
def test_a_trial_without_its_artifacts_file_still_gets_its_run(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    writer = writer_for(tmp_path)
    spool = Spool(tmp_path / "spool")
    trial, artifacts = trial_log(3)
    path = spool_trial(spool, trial, artifacts)
    found = artifacts_file(spool.tables.parent, 3)
    if damage == "missing":
        found.unlink()
    else:
        found.write_bytes(b"not a record")
    tables: dict[str, ChunkTable] = {}
    with caplog.at_level(logging.WARNING, logger="composer.tracking.spooled"):
        assert _write(writer, path, spool.tables, tables, 0) is None
    run = runs_by_trial(tmp_path)[3]
    assert run.info.status == "FINISHED"
    assert run.data.metrics["composite"] == 0.5  # from the record: the trial's metrics are kept
    assert not path.exists()  # the record is written, not set aside
    assert "written from its record alone" in caplog.text
