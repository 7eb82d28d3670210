"""The live view of `composer optimize`: one line per finished trial, and a status line (x/N, best, ETA,
and the running trial's progress: questions retrieved, answered and judged, its LLM requests so far, in
flight and failed, its rate and the time it has left), so a study on a slow local LLM never looks
frozen. Without a terminal (a CI log) the running trial's progress is logged instead, at INFO (``-v``),
at most every ``LOG_EVERY_S`` seconds."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

from rich.markup import escape

from composer.record import TrialRecord
from composer.study.leaderboard import describe_params, header, weighted_metrics

if TYPE_CHECKING:
    import optuna
    from rich.console import Console
    from rich.live import Live

    from composer.llm import Usage

logger = logging.getLogger(__name__)

LOG_EVERY_S = 30.0
"""Without a terminal, a running trial's progress line is logged at most this often."""


@dataclass
class _Running:
    """The trial running now: its number, when it started, and its LLM calls as they are counted."""

    number: int
    usage: Usage
    started: float


class StudyProgress:
    """An Optuna callback drawing progress with Rich; ``target`` is the trial count the study aims for.
    ``stage`` is the running trial's ``Progress``, ``watch`` is told when a trial starts."""

    def __init__(self, console: Console, target: int | None, done: int, timeout: float | None = None) -> None:
        self.console = console
        self.target = target
        self.done = done
        self.timeout = timeout
        self.started = time.monotonic()
        self.finished_here = 0
        self.best: str = "–"
        self.running: dict[str, tuple[int, int]] | None = None
        self.trial: _Running | None = None
        self.log_every = LOG_EVERY_S
        self._logged: float | None = None
        self._live: Live | None = None

    def __enter__(self) -> StudyProgress:
        from rich.live import Live

        self._live = Live(self, console=self.console, refresh_per_second=2, transient=True)
        self._live.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._live is not None:
            self._live.__exit__(kind, exc, tb)
            self._live = None

    def watch(self, number: int, usage: Usage) -> None:
        """Trial ``number`` starts; ``usage`` counts its LLM calls (read at each refresh: requests in
        flight and failed show as they happen, between the stage counts)."""
        self.trial = _Running(number, usage, time.monotonic())
        self.running = None

    def stage(self, name: str, done: int, total: int) -> None:
        """A running trial's progress: ``done`` of ``total`` questions through stage ``name``; logged
        without a terminal (at most every ``log_every`` seconds), where the status line is not drawn."""
        if self.running is None:
            self.running = {}
        self.running[name] = (done, total)
        now = time.monotonic()
        if self.console.is_terminal or not logger.isEnabledFor(logging.INFO):
            return
        if self._logged is None or now - self._logged >= self.log_every:
            self._logged = now
            logger.info("%s", self.trial_line())

    def trial_line(self) -> str:
        """The running trial's progress in one line: "trial #3: retrieved 40/130, answered 12/130, judged
        8/130 · LLM 45 requests, 3 in flight, 2 failed · 0.40 questions/s · about 0:03:40 left"."""
        stages = list((self.running or {}).items())
        trial = self.trial
        parts = [", ".join(f"{name} {done}/{total}" for name, (done, total) in stages)]
        if trial is not None:
            usage = trial.usage
            if usage.requests or usage.in_flight:
                parts.append(f"LLM {usage.requests} requests, {usage.in_flight} in flight, "
                             f"{sum(usage.failed_attempts.values())} failed")
            if stages:
                finished = min(counts[0] for _, counts in stages)  # the questions through every stage
                total = max(counts[1] for _, counts in stages)
                elapsed = time.monotonic() - trial.started
                if finished and elapsed > 0:
                    rate = finished / elapsed
                    parts.append(f"{rate:.2f} questions/s · about {_clock((total - finished) / rate)} left")
        head = f"trial #{trial.number}" if trial is not None else "running"
        return f"{head}: " + " · ".join(p for p in parts if p)

    def __call__(
        self, study: optuna.Study, trial: optuna.trial.FrozenTrial, trials: Sequence[optuna.trial.FrozenTrial]
    ) -> None:
        """A ``TrialHook`` (``composer.study._optimize``): one line for the trial that ended."""
        from optuna.trial import TrialState

        record = TrialRecord.of(trial)
        repeat = record.duplicate_of if record is not None else None
        if trial.state in (TrialState.COMPLETE, TrialState.PRUNED) and repeat is None:
            self.done += 1  # a repeat does not use up one of the n_trials (see composer.study._optimize)
        self.finished_here += 1
        self.running = None
        self.trial = None
        self._update_best(trials)
        value = "–" if trial.values is None else ", ".join(f"{v:.4f}" for v in trial.values)
        note = ""
        if repeat is not None:
            note = f" [dim](same config as #{repeat})[/dim]"
        elif trial.state == TrialState.PRUNED and (at := _pruned_at(record)) is not None:
            note = f" [dim](pruned after {at:.0f} questions)[/dim]"
        elif trial.state == TrialState.FAIL:
            error = (record.error if record is not None else None) or "its process died"
            note = f" [red]{escape(error.splitlines()[0][:300])}[/red]"
        seconds = trial.duration.total_seconds() if trial.duration else 0.0
        self.console.print(
            f"#{trial.number:<3} {trial.state.name:<8} {value:<8} {seconds:6.1f}s  {_weighted(record, study)}"
            f"{escape(describe_params(trial.params))}{note}{_cost(record, trials)}",
            highlight=False,
        )

    def __rich__(self) -> str:
        """Re-rendered at every refresh, so elapsed time, ETA and the running trial's counts tick."""
        return self._status()

    def _update_best(self, trials: Sequence[optuna.trial.FrozenTrial]) -> None:
        from optuna.trial import TrialState

        complete = [t for t in trials if t.state == TrialState.COMPLETE and t.values is not None]
        if complete:
            best = max(complete, key=lambda t: t.values[0])
            self.best = f"{best.values[0]:.4f} (#{best.number})"

    def _status(self) -> str:
        elapsed = time.monotonic() - self.started
        of = f"/{self.target}" if self.target else ""
        eta = "–"
        if self.finished_here and self.target:
            left = max(self.target - self.done, 0)
            eta = _clock(elapsed / self.finished_here * left)
        if self.timeout is not None:
            eta = f"{eta} (timeout in {_clock(max(self.timeout - elapsed, 0))})"
        line = (
            f"[bold]trial {self.done}{of}[/bold] · best {self.best} · elapsed {_clock(elapsed)} · ETA {eta}"
        )
        if self.running or self.trial is not None:
            line += "\n" + escape(self.trial_line())
        return line


def _weighted(record: TrialRecord | None, study: optuna.Study) -> str:
    """The trial's values of the metrics carrying the objective's weight, named as the tables name them."""
    if record is None or not record.metrics:
        return ""
    shown = [f"{header(key)} {value:.3f}" for key in weighted_metrics(study)
             if (value := record.metrics.get(key)) is not None]
    return escape(" ".join(shown)) + "  " if shown else ""


def _cost(record: TrialRecord | None, trials: Sequence[optuna.trial.FrozenTrial]) -> str:
    """The trial's LLM dollars and the study's so far (all workers'), for a trial that called an LLM."""
    from composer.study.budget import spent

    if record is None or not record.llm_usage:
        return ""
    total, _ = spent(trials)
    return f" [dim]· LLM ${record.llm_usage.get('llm_cost_usd', 0.0):.4f} (study ${total:.4f})[/dim]"


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _pruned_at(record: TrialRecord | None) -> float | None:
    """The questions a pruned trial had scored when it stopped."""
    return None if record is None else record.metrics.get("pruned_at_questions")
