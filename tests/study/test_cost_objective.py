"""``llm_cost_usd`` as a secondary objective: read per question, minimized (NSGA-II with quality), and the
trials table names its cost and context-token columns for what they count."""

from __future__ import annotations

import pandas as pd

from composer.objective import Objective, ObjectiveConfig
from composer.study.leaderboard import render_leaderboard


def test_cost_objective_reads_dollars_per_question() -> None:
    config = ObjectiveConfig(metrics={"recall": 1.0}, k=5, secondary=["llm_cost_usd"])
    objective = Objective.resolve(config, {"recall@5"})
    metrics = {"recall@5": 0.8, "llm_cost_usd": 1.2, "llm_cost_per_question_usd": 0.01}
    assert objective.directions == ["maximize", "minimize"]
    assert objective.values(metrics) == (0.8, 0.01)


def test_trials_table_names_cost_and_context_tokens() -> None:
    frame = pd.DataFrame([{"trial": 0, "state": "COMPLETE", "composite": 0.5, "context_tokens": 812.0,
                           "llm_cost_usd": 0.01234, "config": "k=5", "duplicate_of": None,
                           "index_key": None, "seconds": 1.0}])
    table = render_leaderboard(frame)
    headers = [str(c.header) for c in table.columns]
    assert "context tokens" in headers and "LLM $" in headers and "tokens" not in headers
    cost = table.columns[headers.index("LLM $")]
    assert [str(c) for c in cost._cells] == ["0.0123"]
