"""The live view of `composer optimize`: one line per finished trial, and a status line (x/N, best, ETA,
and the running trial's progress: questions retrieved, answered, judged), so a study on a slow local LLM
never looks frozen."""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING

from rich.markup import escape

from composer.record import TrialRecord
from composer.study.leaderboard import describe_params, header, weighted_metrics

if TYPE_CHECKING:
    import optuna
    from rich.console import Console
    from rich.live import Live


class StudyProgress:
    """An Optuna callback drawing progress with Rich; ``target`` is the trial count the study aims for.
    ``stage`` is the running trial's ``StageHook``."""

    def __init__(self, console: Console, target: int | None, done: int, timeout: float | None = None) -> None:
        self.console = console
        self.target = target
        self.done = done
        self.timeout = timeout
        self.started = time.monotonic()
        self.finished_here = 0
        self.best: str = "–"
        self.running: dict[str, tuple[int, int]] | None = None
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

    def stage(self, name: str, done: int, total: int) -> None:
        """A running trial's progress: ``done`` of ``total`` questions through stage ``name``."""
        if self.running is None:
            self.running = {}
        self.running[name] = (done, total)

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
        if self.running:
            line += " · running: " + ", ".join(
                f"{name} {done}/{total}" for name, (done, total) in self.running.items()
            )
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
