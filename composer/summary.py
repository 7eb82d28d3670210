"""The study summary as typed values: made by the study when it ends, read by the CLI, the API and the
MLflow writer.

It lives here, below ``composer.study``, because the writer process (``composer.tracking``) reads it and
must not import the study layer. Its JSON form (``to_dict``) is what the parent run's
``study_summary.json`` holds and, for the held-out re-score, what the Optuna study stores in its
``held_out`` user attribute: ``from_dict`` reads both back, so studies stored by earlier versions still
read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from composer.llm.spend import purpose_metrics

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Contender", "Difference", "HeldOut", "IndexCounts", "JudgeAgreement", "ObjectiveSummary",
           "Separation", "StudyLog", "StudySummary"]


@dataclass(frozen=True)
class Contender:
    """The winner or the runner-up, re-scored on the held-out questions."""

    trial: int
    selection_composite: float | None
    held_out_composite: float

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Contender:
        return cls(int(d["trial"]), d.get("selection_composite"), float(d["held_out_composite"]))


@dataclass(frozen=True)
class Difference:
    """Winner minus runner-up on the held-out questions, paired by question, with its 95% CI."""

    mean: float
    ci95: tuple[float, float]
    n_paired: int
    winner_really_better: bool
    runner_up_really_better: bool

    @property
    def verdict(self) -> str:
        """The answer to "is the winner really better than the runner-up?" in words: the runner-up being
        significantly better is said so, which "not significantly" would hide."""
        if self.winner_really_better:
            return "yes"
        if self.runner_up_really_better:
            return "no, the runner-up is"
        return "not significantly"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ci95": list(self.ci95)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Difference:
        low, high = d["ci95"]
        return cls(float(d["mean"]), (float(low), float(high)), int(d.get("n_paired", 0)),
                   bool(d["winner_really_better"]), bool(d["runner_up_really_better"]))


@dataclass(frozen=True)
class HeldOut:
    """The held-out re-score of the winner and the runner-up. ``error``: why a re-score failed (the
    contenders re-scored before it are kept)."""

    n_questions: int
    winner: Contender | None = None
    runner_up: Contender | None = None
    difference: Difference | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON stored in the study's ``held_out`` user attribute: keys without a value are left out."""
        out: dict[str, Any] = {"n_questions": self.n_questions}
        if self.error is not None:
            out["error"] = self.error
        for role in ("winner", "runner_up"):
            contender = getattr(self, role)
            if contender is not None:
                out[role] = asdict(contender)
        if self.difference is not None:
            out["difference"] = self.difference.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: Any) -> HeldOut | None:
        """The stored JSON back, None if it is none (a study without a split)."""
        if not isinstance(d, dict):
            return None
        winner, runner_up, difference = d.get("winner"), d.get("runner_up"), d.get("difference")
        return cls(
            int(d.get("n_questions", 0)),
            Contender.from_dict(winner) if isinstance(winner, dict) else None,
            Contender.from_dict(runner_up) if isinstance(runner_up, dict) else None,
            Difference.from_dict(difference) if isinstance(difference, dict) else None,
            None if d.get("error") is None else str(d["error"]),
        )


@dataclass(frozen=True)
class Separation:
    """Whether the selection questions separate the winner from the runner-up: the CI of their paired
    difference re-scored on the selection set; one that spans 0 cannot tell them apart."""

    n_questions: int
    winner: int
    runner_up: int
    difference: float
    ci95: tuple[float, float]
    separated: bool

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ci95": list(self.ci95)}

    @classmethod
    def from_dict(cls, d: Any) -> Separation | None:
        """The stored JSON back (the study's ``selection`` user attribute), None if it is none."""
        if not isinstance(d, dict):
            return None
        low, high = d["ci95"]
        return cls(int(d["n_questions"]), int(d["winner"]), int(d["runner_up"]), float(d["difference"]),
                   (float(low), float(high)), bool(d["separated"]))


@dataclass(frozen=True)
class IndexCounts:
    """How much indexing the study paid for: index builds, encode passes, reuses, repeats skipped."""

    trials_indexed: int
    unique_index_keys: int
    index_builds: int
    encode_passes: int
    index_reuses: int
    embeddings_computed: int
    repeats_skipped: int


@dataclass(frozen=True)
class ObjectiveSummary:
    """The objective the study ranked by: as configured, and the weights and notes it resolved to."""

    k_eval: int
    configured: dict[str, float]
    weights: dict[str, float]
    notes: list[str]
    secondary: list[str]


@dataclass(frozen=True)
class JudgeAgreement:
    """The study's judge and how well it agreed with human labels when last checked (``composer judges
    check`` or ``tune``), per judged metric: a check's headline figures (n, accuracy, kappa, spearman,
    ci, labels), None for a metric never checked. Unchecked or below ``min_kappa``, the judge's scores are
    read with a warning; ``command`` is what checks it."""

    judge_model: str
    min_kappa: float
    command: str
    checks: dict[str, dict[str, Any] | None]

    def unchecked(self) -> list[str]:
        return [m for m, c in self.checks.items() if c is None]

    def weak(self) -> list[str]:
        """Checked metrics whose kappa is below ``min_kappa`` (or undefined), or whose check could not
        vouch for the judge (most labels without a verdict of its own)."""
        return [m for m, c in self.checks.items() if c is not None and (
            c.get("trusted") is False or not _at_least(c.get("kappa"), self.min_kappa))]

    def warning(self) -> str | None:
        """What a study says before its first trial when the judge is unchecked or agrees poorly; None
        when every judged metric was checked and agreed."""
        unchecked, weak = self.unchecked(), self.weak()
        if not unchecked and not weak:
            return None
        parts = []
        if unchecked:
            parts.append(f"the judge {self.judge_model} was never checked against human labels for "
                         f"{', '.join(unchecked)}")
        if weak:
            shown = ", ".join(f"{m} ({_kappa_text(self.checks[m])})" for m in weak)
            parts.append(f"the judge {self.judge_model} agrees poorly with human labels (kappa below "
                         f"{self.min_kappa:g}) for {shown}")
        return "; ".join(parts) + f": its scores may not be what people would say. Check it: `{self.command}`"

    def lines(self) -> list[str]:
        """One line per judged metric: its agreement, or that it was never checked."""
        out = []
        for metric, check in self.checks.items():
            if check is None:
                out.append(f"{metric}: never checked against human labels")
                continue
            low, high = (check.get("ci") or {}).get("kappa") or (None, None)
            ci = f" [{_num(low)}, {_num(high)}]" if low is not None and high is not None else ""
            mark = "" if _at_least(check.get("kappa"), self.min_kappa) else f" (below {self.min_kappa:g})"
            out.append(f"{metric}: {_kappa_text(check)}{ci}{mark}, accuracy {_num(check.get('accuracy'))}"
                       f" ({check.get('labels', 'labels')})")
        return out

    def metrics(self) -> dict[str, float]:
        """The parent run's judge metrics: ``judge_kappa.<metric>`` and ``judge_labels.<metric>``."""
        out: dict[str, float] = {}
        for metric, check in self.checks.items():
            kappa = None if check is None else check.get("kappa")
            if isinstance(kappa, int | float) and kappa == kappa:
                out[f"judge_kappa.{metric}"] = float(kappa)
                out[f"judge_labels.{metric}"] = float(check.get("n") or 0) if check is not None else 0.0
        return out

    def to_dict(self) -> dict[str, Any]:
        """Stored as ``judge`` (``from_dict`` reads what earlier versions stored)."""
        out = asdict(self)
        out["judge"] = out.pop("judge_model")
        return out

    @classmethod
    def from_dict(cls, d: Any) -> JudgeAgreement | None:
        """The stored JSON back (the study's ``judge_agreement`` user attribute), None if it is none."""
        if not isinstance(d, dict) or not isinstance(d.get("checks"), dict):
            return None
        checks = {str(m): c if isinstance(c, dict) else None for m, c in d["checks"].items()}
        return cls(str(d.get("judge", "")), float(d.get("min_kappa", 0.4)), str(d.get("command", "")), checks)


def _at_least(kappa: object, floor: float) -> bool:
    return isinstance(kappa, int | float) and kappa == kappa and kappa >= floor


def _num(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, int | float) and value == value else "-"


def _kappa_text(check: dict[str, Any] | None) -> str:
    check = check or {}
    kind = "weighted kappa" if check.get("scale") == "ordinal" else "kappa"
    untrusted = f" of {check.get('labels_total')}, not trusted" if check.get("trusted") is False else ""
    return f"{kind} {_num(check.get('kappa'))} on {check.get('n', 0)} labels{untrusted}"


@dataclass(frozen=True)
class StudySummary:
    """A study's trials by state, its winner, its indexing and LLM spending, the held-out re-score and
    the selection set's separation; ``data`` is what it was run on (its provenance)."""

    study: str
    storage: str
    n_trials: int
    n_complete: int
    n_pruned: int
    n_failed: int
    best_trial: int | None
    best_value: float | None
    best_metrics: dict[str, float] | None
    best_config: dict[str, Any] | None
    objective: ObjectiveSummary
    encode: IndexCounts
    llm_usage: dict[str, float] | None
    """The study's LLM spending by usage metric (``llm_calls``, ``llm_cost_usd``...), every purpose's
    requests summed; None without any."""
    errors: list[str]
    held_out: HeldOut | None
    data: dict[str, Any]
    seconds: float
    pareto_front: list[int] | None = None
    """Trial numbers on the Pareto front of a multi-objective study; None for a single objective."""
    selection: Separation | None = None
    judge_agreement: JudgeAgreement | None = None
    """The judge's checked agreement with human labels; None for a study without a judge."""
    llm_by_purpose: dict[str, dict[str, float]] | None = None
    """The same spending by purpose (``composer.llm.spend.PURPOSES``: preflight, trial, held_out...)."""
    llm_estimate: dict[str, float] | None = None
    """What ``composer optimize --estimate`` foresaw before the first trial (``llm_requests``,
    ``llm_cost_usd``), to set beside ``llm_usage``."""
    prompt_tuning: dict[str, Any] | None = None
    """The staged prompt stage's optimization (``PromptOptimization.to_dict``), or ``{"skipped": why}``
    when it could not run; None without one."""

    def metrics(self) -> dict[str, float]:
        """The headline metrics of the study's parent run."""
        out = {"COMPLETE": float(self.n_complete), "PRUNED": float(self.n_pruned),
               "FAIL": float(self.n_failed)}
        out.update({k: float(v) for k, v in asdict(self.encode).items()})
        out.update(self.llm_usage or {})
        out.update(purpose_metrics(self.llm_by_purpose or {}))
        out.update({f"{k}_estimated": float(v) for k, v in (self.llm_estimate or {}).items()})
        if self.best_value is not None and self.best_trial is not None:
            out["best_value"] = self.best_value
            out["best_trial"] = float(self.best_trial)
        if self.held_out is not None and self.held_out.difference is not None:
            out["held_out_difference"] = float(self.held_out.difference.mean)
        if self.judge_agreement is not None:
            out.update(self.judge_agreement.metrics())
        out["seconds"] = self.seconds
        return out

    def to_dict(self) -> dict[str, Any]:
        """The JSON of the parent run's ``study_summary.json``."""
        out: dict[str, Any] = {
            "study": self.study,
            "storage": self.storage,
            "n_trials": self.n_trials,
            "n_complete": self.n_complete,
            "n_pruned": self.n_pruned,
            "n_failed": self.n_failed,
            "best_trial": self.best_trial,
            "best_value": self.best_value,
            "best_metrics": self.best_metrics,
            "best_config": self.best_config,
            "objective": asdict(self.objective),
            "encode": asdict(self.encode),
            "llm_usage": self.llm_usage,
            "errors": list(self.errors),
            "held_out": None if self.held_out is None else self.held_out.to_dict(),
            "data": self.data,
            "seconds": self.seconds,
        }
        if self.pareto_front is not None:
            out["pareto_front"] = list(self.pareto_front)
        out["selection"] = None if self.selection is None else self.selection.to_dict()
        out["judge_agreement"] = None if self.judge_agreement is None else self.judge_agreement.to_dict()
        out["llm_by_purpose"] = self.llm_by_purpose
        out["llm_estimate"] = self.llm_estimate
        if self.prompt_tuning is not None:
            out["prompt_tuning"] = self.prompt_tuning
        return out


@dataclass(frozen=True)
class StudyLog:
    """What a study hands its MLflow writer when it ends (a spool record of kind ``study``): the summary,
    the leaderboard and Optuna's charts as PNG by name."""

    summary: StudySummary
    leaderboard: pd.DataFrame
    plots: dict[str, bytes]
