"""Whether the objective's metrics steer the study: a weighted metric with one value in every trial adds
the same to each composite, so the sampler learns nothing from it (a metric the data cannot move, a judge
that always gives the same verdict) while its weight dilutes the metrics that do."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from composer.record import TrialRecord
from composer.study.fate import fate_of

if TYPE_CHECKING:
    import optuna

logger = logging.getLogger(__name__)

FIRST = 10
"""Complete trials a weighted metric must have kept one value over to be warned about."""
CONSTANT_ATTR = "constant_metrics"
"""Study user attribute: the weighted metrics found constant over its first ``FIRST`` complete trials
(set once the check ran, so a study warns once, resumed or not)."""


def constant_metrics(rows: Sequence[Mapping[str, float]], weights: Mapping[str, float]) -> list[str]:
    """The weighted metrics with one value in every row (a missing one counts 0, as in the composite)."""
    out = []
    for key in weights:
        values = [0.0 if (value := row.get(key)) is None else value for row in rows]
        if values and max(values) - min(values) <= 1e-12:
            out.append(key)
    return out


class ConstantMetrics:
    """A ``TrialHook`` (``composer.study._optimize``): once the study has ``FIRST`` complete trials, warn
    once about each weighted metric that kept one value over them. ``weights`` gives the objective's
    weights in force (they may narrow at the first trial: ``StudyData.settle``)."""

    def __init__(self, weights: Callable[[], Mapping[str, float]]) -> None:
        self.weights = weights
        self.checked = False

    def __call__(
        self, study: optuna.Study, trial: optuna.trial.FrozenTrial, trials: Sequence[optuna.trial.FrozenTrial]
    ) -> None:
        if self.checked:
            return
        complete = sorted((t for t in trials if fate_of(t) == "complete"), key=lambda t: t.number)[:FIRST]
        if len(complete) < FIRST:
            return
        self.checked = True
        if CONSTANT_ATTR in study.user_attrs:
            return
        rows = [record.metrics for t in complete if (record := TrialRecord.of(t)) is not None]
        constant = constant_metrics(rows, self.weights())
        study.set_user_attr(CONSTANT_ATTR, constant)
        if constant:
            logger.warning(
                "%s kept one value over the first %d complete trials: it adds the same to every composite "
                "and steers nothing (check that the space can move it, or weigh it 0)",
                ", ".join(constant), FIRST,
            )
