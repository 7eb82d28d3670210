"""Ended trials as the MLflow writer receives them (a frozen trial, and the artifacts the runner spooled for
it), made without a study."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from composer.record import TrialRecord
from composer.study.runner import TrialRunner
from composer.tracking.spool import Spool
from composer.tracking.trial import TrialArtifacts


def ended_trial(
    number: int,
    config: Mapping[str, Any],
    state: str = "COMPLETE",
    *,
    metrics: Mapping[str, float] | None = None,
    started: datetime | None = None,
    steps: Sequence[float] = (),
    record: TrialRecord | None = None,
    system_attrs: Mapping[str, Any] | None = None,
    **artifacts: Any,
) -> tuple[FrozenTrial, TrialArtifacts]:
    """Trial ``number`` ended in ``state`` with ``config`` and ``metrics`` on its record (or ``record``),
    ``steps`` as its intermediate values, and ``artifacts`` the TrialArtifacts' fields. Its id is Optuna's
    for a trial outside a storage, as the spool gives it back."""
    record = record or TrialRecord(config, "hash", metrics=dict(metrics or {}))
    value = (record.composite if record.composite is not None else 0.0) if state == "COMPLETE" else None
    start = started or datetime.now(timezone.utc)
    trial = FrozenTrial(
        number=number,
        state=TrialState[state],
        value=None,
        values=None if value is None else [value],
        datetime_start=start,
        datetime_complete=None if state == "RUNNING" else datetime.now(timezone.utc),
        params={},
        distributions={},
        user_attrs={"composer": record.to_dict()},
        system_attrs=dict(system_attrs or {}),
        intermediate_values=dict(enumerate(steps)),
        trial_id=-1,
    )
    return trial, TrialArtifacts(**artifacts)


def scripted_runner(
    run: Callable[[Any], Any], target: int | None = None, spool: Spool | None = None
) -> TrialRunner:
    """A TrialRunner whose trials run ``run(trial)`` instead of a pipeline: its slot checks, failure
    records and spooled artifacts are the study's own."""
    runner = TrialRunner(None, target=target, spool=spool)  # type: ignore[arg-type]
    runner.evaluate = lambda trial, usage: run(trial)  # type: ignore[method-assign]
    return runner
