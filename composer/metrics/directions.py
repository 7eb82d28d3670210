"""Which way each metric is better, and its range: the one place that says so.

Composites and the CI gate add and compare metric means as "higher is better"; a metric where lower is
better entering them unchanged would reward the wrong thing (weighting ``answer_refusal_rate``, refusing
every question wins). Such metrics are refused there (``refusal``); the study's cost objectives, also
lower-is-better, are minimized by NSGA-II instead (``composer.study.experiment.SECONDARY_DIRECTIONS``).
"""

from __future__ import annotations

from typing import Literal

Direction = Literal["higher", "lower"]

DIRECTIONS: dict[str, Direction] = {
    # retrieval, read at a cutoff (recall@10)
    "hit_rate": "higher",
    "recall": "higher",
    "precision": "higher",
    "mrr": "higher",
    "ndcg": "higher",
    # deterministic answer metrics
    "token_f1": "higher",
    "exact_match": "higher",
    "faithfulness_overlap": "higher",
    "refusal_accuracy": "higher",
    "answer_refusal_rate": "lower",
    # the conversation stage's rewrite against the gold standalone question
    "rewrite_similarity": "higher",
    # LLM judges
    "answer_correctness": "higher",
    "faithfulness": "higher",
    "grounded": "higher",
    "llm_judge_rating": "higher",
    "answer_relevancy": "higher",
    "context_precision": "higher",
    "context_recall": "higher",
    # the study's cost objectives (secondary, minimized)
    "latency_ms": "lower",
    "context_tokens": "lower",
    "llm_cost_usd": "lower",
}
"""Every metric by its name (a retrieval metric without its ``@k``): is higher or lower better."""

UNBOUNDED: frozenset[str] = frozenset({"latency_ms", "context_tokens", "llm_cost_usd"})
"""Metrics not bounded in [0, 1]: every other metric is a per-question score in [0, 1]."""


def base_name(key: str) -> str:
    """The metric a report key names: ``recall`` for ``recall@10``."""
    return key.partition("@")[0]


def lower_is_better(key: str) -> bool:
    """Whether lower values of the metric ``key`` (``name`` or ``name@k``) are the better ones."""
    return DIRECTIONS.get(base_name(key)) == "lower"


def bounds(key: str) -> tuple[float, float] | None:
    """The range every per-question value of ``key`` lies in, None where unbounded or unknown."""
    name = base_name(key)
    return (0.0, 1.0) if name in DIRECTIONS and name not in UNBOUNDED else None


def refusal(key: str, where: str) -> str | None:
    """Why ``key`` cannot be read as higher-is-better in ``where`` (a composite, the gate), None if it can."""
    if not lower_is_better(key):
        return None
    better = " (refusal_accuracy scores refusing only the unanswerable questions)" if (
        base_name(key) == "answer_refusal_rate") else ""
    return (f"{key!r} is lower-is-better, and {where} reads higher as better, so it would reward a worse "
            f"system: leave it out{better}")
