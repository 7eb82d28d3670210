"""The study's charts: its optimization history, parameter importances and Pareto front as PNG, logged
with its MLflow run and shown by ``composer report``."""

from __future__ import annotations

import logging
import sys
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

    from composer.study.experiment import ExperimentConfig

logger = logging.getLogger(__name__)

MIN_IMPORTANCE_TRIALS = 5
"""Complete trials of distinct configurations the parameter importances need. fANOVA splits the
trials' variance among the parameters; over fewer points it hands it to whichever parameter happened to
differ between two of them (drawn from one trial, it showed a confident ranking of nothing)."""


def plots(study: optuna.Study, exp: ExperimentConfig) -> dict[str, bytes]:
    """The study's optimization history and parameter importances (and Pareto front) as PNG: small, and
    shown inline by MLflow's artifact view and the HTML report (Plotly's HTML is 4.6 MB a chart)."""
    import io

    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")  # no window, no display needed; a host application's backend is kept
    import matplotlib.pyplot as plt
    from optuna.trial import FrozenTrial, TrialState
    from optuna.visualization import matplotlib as vis

    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return {}  # nothing to draw: Optuna would only print a warning per plot

    def composite(t: FrozenTrial) -> float:
        return float(t.values[0])

    kw: dict[str, Any] = {"target": composite, "target_name": "composite"} if exp.multi_objective else {}
    makers: dict[str, Any] = {"optimization_history": lambda: vis.plot_optimization_history(study, **kw)}
    if importances_note(study) is None:
        makers["param_importances"] = lambda: _importances(study, kw)
    if exp.multi_objective:
        names = ["composite", *exp.objective.secondary]
        makers["pareto_front"] = lambda: vis.plot_pareto_front(study, target_names=names)
    out: dict[str, bytes] = {}
    for name, make in makers.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Optuna's notes on tiny studies, its experimental warnings
                axes = make()
            figure = axes.figure if hasattr(axes, "figure") else axes.flat[0].figure
            figure.set_size_inches(9, 5)
            figure.tight_layout()
            buffer = io.BytesIO()
            figure.savefig(buffer, format="png", dpi=100)
            plt.close(figure)
            out[name] = buffer.getvalue()
        except Exception as exc:  # a plot Optuna cannot draw yet (too little variance) is skipped
            logger.warning("plot %s skipped: %s", name, exc)
    return out


def importances_note(study: optuna.Study) -> str | None:
    """Why the study's parameter importances are not drawn (too few complete trials); None if they are."""
    import json

    from optuna.trial import TrialState

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    n = len({json.dumps(t.params, sort_keys=True, default=str) for t in complete})  # repeats count once
    if n >= MIN_IMPORTANCE_TRIALS:
        return None
    return (f"not drawn: {n} complete trial{'' if n == 1 else 's'} of distinct configurations, fewer than "
            f"the {MIN_IMPORTANCE_TRIALS} that parameter importances need to mean anything")


def _importances(study: optuna.Study, kw: dict[str, Any]) -> Any:
    """fANOVA reads variance whatever the direction (Optuna's default, PED-ANOVA, assumes a custom target
    is minimized: it would invert the composite's importances); it needs some variance among trials."""
    import optuna
    from optuna.visualization import matplotlib as vis

    fanova = optuna.importance.FanovaImportanceEvaluator(seed=0)
    try:
        return vis.plot_param_importances(study, evaluator=fanova, **kw)
    except RuntimeError:  # zero variance: too few distinct results yet
        return vis.plot_param_importances(study, **kw)
