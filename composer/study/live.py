"""The live view of `composer optimize`: one line per finished trial and a status line (x/N, best, ETA)."""

from __future__ import annotations

import time
from types import TracebackType
from typing import TYPE_CHECKING

from composer.study.leaderboard import describe_params

if TYPE_CHECKING:
    import optuna
    from rich.console import Console
    from rich.live import Live


class StudyProgress:
    """An Optuna callback drawing progress with Rich; ``target`` is the trial count the study aims for."""

    def __init__(self, console: Console, target: int | None, done: int, timeout: float | None = None) -> None:
        self.console = console
        self.target = target
        self.done = done
        self.timeout = timeout
        self.started = time.monotonic()
        self.finished_here = 0
        self.best: str = "–"
        self._live: Live | None = None

    def __enter__(self) -> StudyProgress:
        from rich.live import Live

        self._live = Live(self, console=self.console, refresh_per_second=2, transient=True)
        self._live.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.__exit__(kind, exc, tb)
            self._live = None

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        from optuna.trial import TrialState

        if trial.state in (TrialState.COMPLETE, TrialState.PRUNED) and "duplicate_of" not in trial.user_attrs:
            self.done += 1  # a repeat does not use up one of the n_trials (see composer.study.study)
        self.finished_here += 1
        self._update_best(study)
        value = "–" if trial.values is None else ", ".join(f"{v:.4f}" for v in trial.values)
        note = ""
        if "duplicate_of" in trial.user_attrs:
            note = f" [dim](same config as #{trial.user_attrs['duplicate_of']})[/dim]"
        elif trial.state == TrialState.PRUNED:
            at = trial.user_attrs.get("pruned_at", {}).get("questions", "?")
            note = f" [dim](pruned after {at} questions)[/dim]"
        elif trial.state == TrialState.FAIL:
            note = f" [red]{trial.user_attrs.get('error', 'failed')}[/red]"
        seconds = trial.duration.total_seconds() if trial.duration else 0.0
        self.console.print(f"#{trial.number:<3} {trial.state.name:<8} {value:<8} {seconds:6.1f}s  "
                           f"{describe_params(trial.params)}{note}", highlight=False)

    def __rich__(self) -> str:
        """Re-rendered at every refresh, so elapsed time and ETA tick between trials."""
        return self._status()

    def _update_best(self, study: optuna.Study) -> None:
        from optuna.trial import TrialState

        complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                    if t.values is not None]
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
        return (f"[bold]trial {self.done}{of}[/bold] · best {self.best} · elapsed {_clock(elapsed)}"
                f" · ETA {eta}")


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
