"""The objective: what a study maximizes, as configured (``ObjectiveConfig``, the experiment's ``objective:``)
and as resolved against the metrics a study can score (``Objective``): a weighted mean of quality metrics read
at one fixed cutoff. It sits below ``composer.evaluation`` and ``composer.study``: the CI gate and the study
read it alike.

The cutoff is the experiment's, never the trial's own ``retrieval.k``: recall@k grows with k, so scoring
each trial at its own k always crowns the largest k (the k trap). What a larger k costs enters as its own
objectives (``context_tokens``, ``latency_ms``), for NSGA-II to trade off.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field, field_validator, model_validator

from composer.data.types import Question
from composer.errors import ConfigError
from composer.metrics.directions import DIRECTIONS, UNBOUNDED, refusal
from composer.metrics.retrieval import RETRIEVAL_METRICS, metric_key
from composer.settings import Strict

SECONDARY_DIRECTIONS: dict[str, Literal["minimize", "maximize"]] = {
    name: "minimize" if DIRECTIONS[name] == "lower" else "maximize" for name in UNBOUNDED
}
"""The study's secondary objectives (cost-like, unbounded) and Optuna's direction for each, read from the one
table of metric directions."""
SECONDARY_METRICS: dict[str, str] = {"llm_cost_usd": "llm_cost_per_question_usd"}
"""A secondary objective's metric key where it differs from its name: ``llm_cost_usd`` is read per question
(a trial's total grows with the questions it ran, which a pruned trial ran fewer of)."""

ANSWER_METRICS: tuple[str, ...] = ("token_f1", "exact_match", "faithfulness_overlap", "answer_refusal_rate",
                                   "refusal_accuracy")
"""Deterministic metrics of an answer: free, but only with answers (which a retrieval-only study skips)."""
QUERY_METRICS: tuple[str, ...] = ("rewrite_similarity",)
"""Deterministic metrics of the query searched, against a gold standalone rewrite: free, with no answer."""


def known_metrics() -> list[str]:
    """Every metric name an objective may weigh (retrieval metrics also as ``name@k``)."""
    from composer.judges.panel import JUDGE_METRICS  # the judges pull in the LLM client: on first check only

    return [*RETRIEVAL_METRICS, *ANSWER_METRICS, *QUERY_METRICS, *JUDGE_METRICS, "grounded"]


def unknown_metric(name: str) -> bool:
    """A name no study could ever score: a typo, which must not silently drop out of the objective."""
    base, at, k = name.partition("@")
    if at:
        return base not in RETRIEVAL_METRICS or not k.isdigit() or int(k) < 1
    return name not in known_metrics()


class ObjectiveConfig(Strict):
    """A weighted mean of quality metrics at one fixed cutoff, plus optional cost objectives: the
    experiment's ``objective:`` block (``composer.optimize(objective=...)``).

    Attributes:
        metrics: Metric -> weight; retrieval metrics are read at ``k``.
        k: The fixed cutoff of the retrieval metrics.
        secondary: Cost objectives minimized beside the composite.

    Example:
        ::

            objective = composer.ObjectiveConfig(metrics={"recall": 1.0, "ndcg": 2.0}, k=5)
            composer.optimize("experiments/arabic-demo.yaml", objective=objective)
    """

    metrics: dict[str, float] = Field(
        default_factory=lambda: {"recall": 1.0, "ndcg": 1.0, "answer_correctness": 1.0, "faithfulness": 1.0},
        description="Metric -> weight. Retrieval metrics are read at the fixed cutoff `k`.",
    )
    k: int = Field(default=10, ge=1, description="Fixed cutoff for retrieval metrics (never the trial's k).")
    secondary: list[Literal["latency_ms", "context_tokens", "llm_cost_usd"]] = Field(
        default_factory=list,
        description="Extra objectives to minimize (llm_cost_usd: dollars per question); more than one "
        "objective -> NSGA-II."
    )

    @field_validator("metrics")
    @classmethod
    def _known_metrics(cls, metrics: dict[str, float]) -> dict[str, float]:
        unknown = [m for m in metrics if unknown_metric(m)]
        if unknown:
            raise ValueError(
                f"unknown metric {unknown[0]!r}; known: {', '.join(known_metrics())} "
                "(retrieval metrics are read at k, or name one with its cutoff, e.g. recall@5)"
            )
        refused = [why for m, w in metrics.items() if w and (why := refusal(m, "a composite"))]
        if refused:
            raise ValueError(refused[0])
        return metrics

    @model_validator(mode="after")
    def _positive_weights(self) -> ObjectiveConfig:
        if not self.metrics:
            raise ValueError("name at least one metric")
        bad = [m for m, w in self.metrics.items() if w < 0]
        if bad or sum(self.metrics.values()) <= 0:
            raise ValueError(f"weights must be >= 0 with a positive sum (check {bad or list(self.metrics)})")
        return self


logger = logging.getLogger(__name__)

# LLM-judge metrics and the deterministic metric standing in for each in a study without a judge:
# token-level F1 against the gold answers for correctness, and the share of answer tokens found in the
# retrieved contexts for faithfulness.
STAND_INS: dict[str, str] = {"answer_correctness": "token_f1", "faithfulness": "faithfulness_overlap"}

def available_metrics(questions: Iterable[Question], ks: Iterable[int], judged: Iterable[str]) -> set[str]:
    """Every metric a study on ``questions`` can score: retrieval metrics at each cutoff, the answer metrics
    its labels allow (gold answers for F1 and exact match, unanswerable questions for refusal accuracy),
    and the ``judged`` metrics of its judge (``grounded`` with faithfulness)."""
    items = list(questions)
    out = {metric_key(name, k) for name in RETRIEVAL_METRICS for k in ks}
    out |= {"faithfulness_overlap", "answer_refusal_rate"}
    if any(q.gold_answers for q in items):
        out |= {"token_f1", "exact_match"}
    if any(not q.gold_answers for q in items):
        out.add("refusal_accuracy")
    if any(q.standalone for q in items):
        out.update(QUERY_METRICS)
    judged = set(judged)
    out |= judged | ({"grounded"} if "faithfulness" in judged else set())
    return out


def cutoffs(config: ObjectiveConfig) -> set[int]:
    """The cutoffs the objective reads retrieval metrics at (its ``k``, and each ``name@k`` it names): an
    evaluation must score them, whatever cutoffs it was asked for, for the composite to exist."""
    out: set[int] = set()
    for name, weight in config.metrics.items():
        base, at, k = name.partition("@")
        if weight and base in RETRIEVAL_METRICS:
            out.add(int(k) if at else config.k)
    return out


class NothingToScore(ConfigError):
    """None of the objective's metrics can be scored: no trial of the study can have a value."""


NO_ANSWER = "the system has no answer(question, contexts) method"
"""Why a user's retrieval-only system scores no answer metric (``Objective.without_answers``)."""


def needs_answers(objective: Objective) -> bool:
    """Whether any weighted metric reads an answer (retrieval-only objectives generate none)."""
    return any(not _is_retrieval(key) and key not in QUERY_METRICS for key in objective.weights)


def _is_retrieval(key: str) -> bool:
    name, at, k = key.partition("@")
    return bool(at) and name in RETRIEVAL_METRICS and k.isdigit()


@dataclass(frozen=True)
class Objective:
    """Resolved weights (report metric key -> weight, summing to 1) and the secondary objectives."""

    weights: Mapping[str, float]
    secondary: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @classmethod
    def resolve(cls, config: ObjectiveConfig, available: Collection[str]) -> Objective:
        """Map configured metric names onto the metrics a report actually has.

        Retrieval metrics are read at ``config.k``; an LLM-judge metric without a judge falls back to its
        deterministic stand-in; any other missing metric is dropped. Each substitution or drop is logged
        as a warning and kept in ``notes``, and the remaining weights are renormalized.
        """
        weights: dict[str, float] = {}
        notes: list[str] = []
        for name, weight in config.metrics.items():
            if weight == 0:
                continue
            key = metric_key(name, config.k) if name in RETRIEVAL_METRICS else name
            if key not in available and name in STAND_INS and STAND_INS[name] in available:
                notes.append(f"'{name}' needs an LLM judge, none is configured: using its deterministic "
                             f"stand-in '{STAND_INS[name]}'")
                key = STAND_INS[name]
            if key not in available:
                notes.append(f"'{name}' is not available in this run ({key} was not scored): dropped, "
                             "remaining weights renormalized")
                continue
            weights[key] = weights.get(key, 0.0) + weight
        if not weights:
            raise NothingToScore(f"none of the objective's metrics can be scored here: "
                                 f"{list(config.metrics)}", field="objective.metrics")
        total = sum(weights.values())
        for note in notes:
            logger.warning(note)
        return cls({k: w / total for k, w in weights.items()}, tuple(config.secondary), tuple(notes))

    def without_answers(self, why: str = NO_ANSWER) -> Objective:
        """This objective over its retrieval metrics alone, for a system that gives no answer: its answer
        metrics would count 0 in every trial (a retrieval-only system at recall 0.93 scored 0.46), so they
        leave the composite, named in a warning and a note, and the remaining weights are renormalized."""
        dropped = [key for key in self.weights if not _is_retrieval(key)]
        if not dropped:
            return self
        kept = {key: weight for key, weight in self.weights.items() if _is_retrieval(key)}
        if not kept:
            raise NothingToScore(f"{why}, and the objective weighs only answer metrics "
                                 f"({', '.join(dropped)}): weigh a retrieval metric, or give the system an "
                                 "answer method", field="objective.metrics")
        total = sum(kept.values())
        note = (f"{why}: {', '.join(dropped)} cannot be scored and leave the composite; weights "
                f"renormalized over {', '.join(kept)}")
        logger.warning(note)
        return Objective({k: w / total for k, w in kept.items()}, self.secondary, (*self.notes, note))

    @property
    def directions(self) -> list[str]:
        return ["maximize", *(SECONDARY_DIRECTIONS[s] for s in self.secondary)]

    def composite(self, metrics: Mapping[str, float | None]) -> float:
        """The one definition of a trial's score: the weighted sum of its metric means, each over the
        questions that scored it; a metric nobody scored counts as 0. The trial's value, its held-out
        score and the held-out difference with its CI (``difference``) all read it."""
        means = {k: np.array([np.nan if (v := metrics.get(k)) is None else v], dtype=np.float64)
                 for k in self.weights}
        return float(self.composites(means)[0])

    def composites(self, means: Mapping[str, npt.NDArray[np.float64]]) -> npt.NDArray[np.float64]:
        """``composite`` of many sets of metric means at once (one per position: bootstrap resamples)."""
        size = max((len(v) for v in means.values()), default=1)
        out = np.zeros(size)
        for key, weight in self.weights.items():
            value = means.get(key)
            if value is not None:
                out += weight * np.where(np.isfinite(value), value, 0.0)
        return out

    def difference(
        self,
        a: Mapping[str, npt.NDArray[np.float64]],
        b: Mapping[str, npt.NDArray[np.float64]],
        groups: Sequence[str] | None = None,
    ) -> tuple[float, tuple[float, float]]:
        """Composite of ``a`` minus composite of ``b``, two systems' per-question metric columns over the
        same questions (NaN = not scored), and the 95% paired bootstrap CI of that same difference,
        resampling whole ``groups`` (each question's conversation) when given."""
        from composer.metrics.stats import paired_statistic_ci

        def means(columns: Mapping[str, npt.NDArray[np.float64]]) -> dict[str, float | None]:
            return {k: float(np.mean(v[~np.isnan(v)])) if (~np.isnan(v)).any() else None
                    for k, v in columns.items()}

        lengths = {len(v) for v in (*a.values(), *b.values())}
        if len(lengths) != 1:
            raise ValueError(f"paired columns need one length, got {sorted(lengths)}")
        keys = [k for k in self.weights if k in a or k in b]
        if not keys:
            return 0.0, (0.0, 0.0)  # nothing weighted was scored: both composites are 0
        missing = np.full(lengths.pop(), np.nan)
        a_cols = {k: a.get(k, missing) for k in keys}
        b_cols = {k: b.get(k, missing) for k in keys}
        point = self.composite(means(a_cols)) - self.composite(means(b_cols))
        return point, paired_statistic_ci(a_cols, b_cols, self.composites, groups=groups)

    def values(self, metrics: Mapping[str, float | None]) -> tuple[float, ...]:
        """The study's objective values: the composite, then each secondary metric."""
        return (self.composite(metrics),
                *(_finite(metrics.get(SECONDARY_METRICS.get(s, s))) for s in self.secondary))


def _finite(value: float | None) -> float:
    return value if value is not None and math.isfinite(value) else 0.0
