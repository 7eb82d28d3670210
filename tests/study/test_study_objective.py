"""The composite objective: fixed cutoff, stand-ins for LLM metrics, dropping and renormalizing weights."""

from __future__ import annotations

import logging

import pytest

from composer.errors import ConfigError
from composer.objective import STAND_INS, Objective, ObjectiveConfig

ALL = ["recall@1", "recall@5", "recall@10", "ndcg@5", "ndcg@10", "token_f1", "faithfulness_overlap",
       "exact_match"]


def test_default_objective_uses_stand_ins_for_llm_metrics(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="composer.objective"):
        obj = Objective.resolve(ObjectiveConfig(k=5), ALL)
    assert dict(obj.weights) == {"recall@5": 0.25, "ndcg@5": 0.25, "token_f1": 0.25,
                                 "faithfulness_overlap": 0.25}
    assert STAND_INS == {"answer_correctness": "token_f1", "faithfulness": "faithfulness_overlap"}
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "'answer_correctness' needs an LLM judge" in warned and "'token_f1'" in warned
    assert "'faithfulness_overlap'" in warned
    assert len(obj.notes) == 2


def test_retrieval_is_read_at_the_fixed_cutoff_not_the_trials_k() -> None:
    obj = Objective.resolve(ObjectiveConfig(k=5, metrics={"recall": 1.0}), ALL)
    # A trial retrieving 10 hits has a higher recall@10; the objective ignores it (the k trap).
    assert obj.composite({"recall@5": 0.6, "recall@10": 0.9}) == pytest.approx(0.6)


def test_an_unavailable_metric_is_dropped_and_weights_renormalized(caplog: pytest.LogCaptureFixture) -> None:
    retrieval_only = ["recall@10", "ndcg@10"]
    with caplog.at_level(logging.WARNING, logger="composer.objective"):
        obj = Objective.resolve(ObjectiveConfig(), retrieval_only)
    assert dict(obj.weights) == {"recall@10": 0.5, "ndcg@10": 0.5}
    assert sum("dropped" in r.getMessage() for r in caplog.records) == 2
    assert obj.composite({"recall@10": 0.8, "ndcg@10": 0.6}) == pytest.approx(0.7)


def test_custom_weights_zero_weights_and_explicit_cutoffs() -> None:
    cfg = ObjectiveConfig(k=10, metrics={"recall": 3.0, "mrr": 0.0, "ndcg@5": 1.0})
    obj = Objective.resolve(cfg, ALL)
    assert dict(obj.weights) == {"recall@10": 0.75, "ndcg@5": 0.25}
    assert obj.composite({"recall@10": 1.0, "ndcg@5": 0.2}) == pytest.approx(0.8)


def test_a_metric_and_its_stand_in_merge_their_weights() -> None:
    obj = Objective.resolve(ObjectiveConfig(metrics={"answer_correctness": 1.0, "token_f1": 1.0}), ALL)
    assert dict(obj.weights) == {"token_f1": 1.0}


def test_nothing_scorable_is_an_error() -> None:
    with pytest.raises(ConfigError, match="none of the objective's metrics"):
        Objective.resolve(ObjectiveConfig(metrics={"answer_correctness": 1.0}), ["recall@10"])


def test_unscored_metric_in_a_batch_counts_as_zero() -> None:
    obj = Objective.resolve(ObjectiveConfig(k=5, metrics={"recall": 1.0, "token_f1": 1.0}), ALL)
    assert obj.composite({"recall@5": 1.0}) == pytest.approx(0.5)
    assert obj.composite({"recall@5": 1.0, "token_f1": None}) == pytest.approx(0.5)


def test_secondary_objectives_follow_the_composite() -> None:
    cfg = ObjectiveConfig(k=5, metrics={"recall": 1.0}, secondary=["latency_ms", "context_tokens"])
    obj = Objective.resolve(cfg, ALL)
    assert obj.directions == ["maximize", "minimize", "minimize"]
    assert obj.values({"recall@5": 0.5, "latency_ms": 12.0, "context_tokens": 300.0}) == (0.5, 12.0, 300.0)


@pytest.mark.parametrize(
    "metrics", [{}, {"recall": -1.0}, {"recall": 0.0}],
)
def test_weights_must_be_non_negative_with_a_positive_sum(metrics: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ObjectiveConfig(metrics=metrics)
