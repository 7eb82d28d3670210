"""rewrite_similarity: the searched query against the gold standalone rewrite, as token F1 after ar/fa/en
normalization; a column only where questions carry a rewrite, and a metric an objective may weigh."""

from __future__ import annotations

import math

import numpy as np
import pytest

from composer.data.ranking import ChunkTable, Ranking
from composer.data.types import Question, Turn
from composer.evaluation.columns import score_ranking
from composer.metrics.directions import bounds, lower_is_better
from composer.metrics.rewrite import rewrite_similarities, rewrite_similarity
from composer.objective import ObjectiveConfig, available_metrics, known_metrics


def test_identical_is_one_and_disjoint_is_zero() -> None:
    assert rewrite_similarity("When did Jamal Khashoggi die?", "When did Jamal Khashoggi die?") == 1.0
    assert rewrite_similarity("capital of Egypt", "When did Jamal Khashoggi die?") == 0.0
    assert rewrite_similarity("Khashoggi die", "When did Jamal Khashoggi die?") == pytest.approx(0.8)


def test_arabic_and_persian_spellings_fold_before_comparing() -> None:
    # hamza on alef, teh marbuta, harakat and tatweel fold away: the same words
    assert rewrite_similarity("متى تُوفّي جمال خاشقـجي في إسطنبول؟", "متى توفي جمال خاشقجي في اسطنبول") == 1.0
    assert rewrite_similarity("قيمت كتاب چقدر است؟", "قیمت کتاب چقدر است؟", "fa") == 1.0  # Arabic yeh/kaf


def test_the_column_scores_only_questions_with_a_rewrite_and_falls_back_to_the_question() -> None:
    history = (Turn("user", "من هو جمال خاشقجي؟"),)
    questions = [
        Question("q1", "من هو جمال خاشقجي؟"),
        Question("q2", "ومتى توفي؟", history=history, standalone="متى توفي جمال خاشقجي؟"),
    ]
    assert rewrite_similarities(questions[:1]) is None
    alone = rewrite_similarities(questions)
    assert alone is not None and math.isnan(alone[0]) and 0.0 < alone[1] < 1.0  # searched as asked
    rewritten = rewrite_similarities(questions, {"q2": "متى توفي جمال خاشقجي"})
    assert rewritten is not None and rewritten[1] == 1.0



def test_scoring_adds_the_column_from_the_searched_queries() -> None:
    history = (Turn("user", "من هو جمال خاشقجي؟"),)
    questions = [
        Question("q1", "من هو جمال خاشقجي؟", relevant_ids=("d1",)),
        Question("q2", "ومتى توفي؟", relevant_ids=("d1",), history=history,
                 standalone="متى توفي جمال خاشقجي؟"),
    ]
    items = ChunkTable(("d1",), ("d1",), ("",))
    ranking = Ranking(("q1", "q2"), np.array([[0], [0]]), np.array([[1.0], [1.0]]), items)
    searched = {"q2": "متى توفي جمال خاشقجي"}
    table = score_ranking(questions, ranking, ks=[1], mode="document", searched=searched)
    column = table.metrics["rewrite_similarity"]
    assert np.isnan(column[0]) and column[1] == 1.0
    plain = score_ranking(questions[:1], ranking.rows(0, 1), ks=[1], mode="document")
    assert "rewrite_similarity" not in plain.metrics


def test_an_objective_may_weigh_it_higher_is_better_in_zero_one() -> None:
    assert "rewrite_similarity" in known_metrics()
    assert not lower_is_better("rewrite_similarity") and bounds("rewrite_similarity") == (0.0, 1.0)
    ObjectiveConfig(metrics={"recall": 1.0, "rewrite_similarity": 0.5})
    plain = [Question("q1", "q", relevant_ids=("d1",))]
    follow = [*plain, Question("q2", "and?", history=(Turn("user", "q"),), standalone="q again")]
    assert "rewrite_similarity" not in available_metrics(plain, [5], [])
    assert "rewrite_similarity" in available_metrics(follow, [5], [])
