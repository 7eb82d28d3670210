"""Every metric declares its direction and range, the docs list them, and a lower-is-better metric never
enters a composite as if higher were better (issue 41: a study weighting answer_refusal_rate maximised
refusals)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError
from sample_study import write_experiment

from composer.errors import ConfigError, InputError
from composer.evaluation.gate import gate_objective, parse_objective
from composer.metrics.directions import DIRECTIONS, bounds, lower_is_better
from composer.objective import SECONDARY_DIRECTIONS, ObjectiveConfig, known_metrics
from composer.study.experiment import load_experiment

DOCS = Path(__file__).resolve().parents[2] / "docs" / "reference" / "metrics.md"


def test_every_metric_has_a_direction_and_the_secondary_objectives_agree() -> None:
    assert set(known_metrics()) | set(SECONDARY_DIRECTIONS) == set(DIRECTIONS)
    assert SECONDARY_DIRECTIONS == {"latency_ms": "minimize", "context_tokens": "minimize",
                                    "llm_cost_usd": "minimize"}
    assert lower_is_better("answer_refusal_rate") and not lower_is_better("refusal_accuracy")
    assert not lower_is_better("ndcg@10") and bounds("ndcg@10") == (0.0, 1.0)
    assert bounds("latency_ms") is None and bounds("no_such_metric") is None


def test_the_docs_list_every_metric_with_its_direction() -> None:
    table = r"^\| `([a-z0-9_]+)(?:@k)?` \| (higher|lower) \|"
    rows = dict(re.findall(table, DOCS.read_text(encoding="utf-8"), flags=re.MULTILINE))
    assert rows == DIRECTIONS


def test_a_composite_refuses_a_lower_is_better_metric(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="'answer_refusal_rate' is lower-is-better"):
        ObjectiveConfig(metrics={"recall": 1.0, "answer_refusal_rate": 1.0})
    assert ObjectiveConfig(metrics={"recall": 1.0, "answer_refusal_rate": 0.0}).k == 10  # unweighted: fine
    with pytest.raises(ConfigError, match="refusal_accuracy scores refusing only the unanswerable"):
        parse_objective("recall@10=1,answer_refusal_rate=1")
    exp = write_experiment(tmp_path, objective={"k": 5, "metrics": {"recall": 1, "answer_refusal_rate": 1}})
    with pytest.raises(ConfigError) as raised:
        load_experiment(exp)
    assert raised.value.path == str(exp) and raised.value.field == "objective.metrics"


def test_the_gate_refuses_a_lower_is_better_metric() -> None:
    with pytest.raises(InputError, match="the gate reads higher as better"):
        gate_objective("answer_refusal_rate", None, {"answer_refusal_rate", "recall@10"})
    assert dict(gate_objective("refusal_accuracy", None, {"refusal_accuracy"}).weights) == {
        "refusal_accuracy": 1.0}
