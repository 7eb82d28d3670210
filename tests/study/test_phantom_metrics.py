"""No phantom metrics: a metric the study's system cannot produce (the answer metrics of a retrieval-only
system) leaves the composite, weights renormalized and the metrics named, instead of counting 0 in every
trial; decided once per study. A weighted metric that keeps one value over the first complete trials is
named once: it steers nothing."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import optuna
import pytest
from sample_study import sample_corpus, sample_questions

import composer
from composer.data.types import Corpus, QuestionSet
from composer.objective import NothingToScore, Objective, ObjectiveConfig
from composer.record import TrialRecord
from composer.study.data import ANSWERS_ATTR, StudyData
from composer.study.leaderboard import WEIGHTS_ATTR, leaderboard
from composer.study.space_file import parse_search_space
from composer.study.steering import CONSTANT_ATTR, FIRST, ConstantMetrics, constant_metrics

DEFAULT_KEYS = {"recall@10", "ndcg@10", "token_f1", "faithfulness_overlap"}


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return sample_corpus()


@pytest.fixture(scope="module")
def questions(corpus: Corpus) -> QuestionSet:
    return sample_questions(corpus, 20)


class Shelf:
    """A retrieval-only system (no ``answer``): the same ten documents for every question, the first
    ``shift`` moved to the end. Recall@10 reads the set, so it is the same whatever ``shift``; nDCG@10
    reads the order."""

    def __init__(self, ids: list[str], shift: int) -> None:
        self.ids = ids[shift:] + ids[:shift]

    def retrieve(self, question: str) -> list[str]:
        return self.ids


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and text in r.getMessage()]


@pytest.mark.slow
def test_a_retrieval_only_system_is_scored_on_its_retrieval_metrics_alone(
    corpus: Corpus, questions: QuestionSet, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    relevant = list(dict.fromkeys(i for q in questions for i in q.relevant_ids))[:10]
    caplog.set_level(logging.WARNING, logger="composer")
    result = composer.optimize(  # the default objective: recall, nDCG, answer_correctness, faithfulness
        lambda settings: Shelf(relevant, settings["shift"]),
        space={"dimensions": {"shift": {"choices": list(range(FIRST))}}},
        questions=questions, corpus=corpus, workdir=tmp_path, name="shelf", n_trials=FIRST,
        sampler={"name": "grid"}, pruner="none",
    )
    study = result.study
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) == FIRST
    for t in complete:  # the retrieval-only composite, not a quarter of it twice over
        metrics = TrialRecord.of(t).metrics  # type: ignore[union-attr]
        assert "token_f1" not in metrics and "faithfulness_overlap" not in metrics
        assert t.value == pytest.approx(0.5 * metrics["recall@10"] + 0.5 * metrics["ndcg@10"])
    assert study.user_attrs[WEIGHTS_ATTR] == {"recall@10": 0.5, "ndcg@10": 0.5}
    assert study.user_attrs[ANSWERS_ATTR] is False
    (dropped,) = _warnings(caplog, "leave the composite")  # once, for the study, not once a trial
    assert "token_f1, faithfulness_overlap" in dropped and "answer(question, contexts)" in dropped
    assert dropped in result.summary.objective.notes
    assert result.summary.objective.weights == {"recall@10": 0.5, "ndcg@10": 0.5}
    (constant,) = _warnings(caplog, "steers nothing")
    assert constant.startswith("recall@10 kept one value") and "ndcg" not in constant
    assert study.user_attrs[CONSTANT_ATTR] == ["recall@10"]
    board = leaderboard(study)
    assert {"recall@10", "ndcg@10"} <= set(board.columns)
    assert not {"token_f1", "faithfulness_overlap"} & set(board.columns)


def _data(corpus: Corpus, questions: QuestionSet, tmp_path: Path, objective: dict[str, Any]) -> StudyData:
    space = parse_search_space({"dimensions": {"shift": {"choices": [0, 1]}}}, source="test", free=True)
    return StudyData(corpus, questions, space, ObjectiveConfig.model_validate(objective), tmp_path,
                     system=lambda settings: Shelf([], 0))


def test_the_studys_record_decides_and_a_later_system_cannot_change_it(
    corpus: Corpus, questions: QuestionSet, tmp_path: Path
) -> None:
    study = optuna.create_study(direction="maximize")
    first = _data(corpus, questions, tmp_path, {"metrics": {"recall": 1, "answer_correctness": 3}})
    first = first.settle(study)  # before any trial: nothing is known yet
    assert set(first.objective.weights) == {"recall@10", "token_f1"}
    first = first.settle(study, can_answer=False)
    assert first.objective.weights == {"recall@10": 1.0}
    first = first.settle(study, can_answer=True)  # a later trial's system: the study decided at the first
    assert first.objective.weights == {"recall@10": 1.0}
    resumed = _data(corpus, questions, tmp_path, {"metrics": {"recall": 1, "answer_correctness": 3}})
    resumed = resumed.settle(study)  # another run of the study: its record, before its first trial
    assert resumed.objective.weights == {"recall@10": 1.0} == study.user_attrs[WEIGHTS_ATTR]


def test_an_objective_of_answer_metrics_alone_cannot_drop_them() -> None:
    objective = Objective.resolve(ObjectiveConfig(metrics={"answer_correctness": 1, "faithfulness": 1}),
                                  {"token_f1", "faithfulness_overlap"})
    only = r"weighs only answer metrics \(token_f1, faithfulness_overlap\)"
    with pytest.raises(NothingToScore, match=only):
        objective.without_answers()
    retrieval = Objective({"recall@5": 0.4, "ndcg@5": 0.6})
    assert retrieval.without_answers() is retrieval


def test_a_metric_constant_over_the_rows_is_named_a_missing_one_counting_zero() -> None:
    rows = [{"recall@5": 0.8, "ndcg@5": 0.5 + i / 10, "faithfulness": 1.0} for i in range(3)]
    weights = {"recall@5": 0.25, "ndcg@5": 0.25, "faithfulness": 0.25, "answer_correctness": 0.25}
    assert constant_metrics(rows, weights) == ["recall@5", "faithfulness", "answer_correctness"]


def _complete(study: optuna.Study, number: int, metrics: dict[str, float]) -> None:
    record = TrialRecord({"i": number}, f"h{number}", metrics={**metrics, "composite": 0.5})
    study.add_trial(optuna.trial.create_trial(
        params={"i": number}, distributions={"i": optuna.distributions.IntDistribution(0, 100)}, value=0.5,
        user_attrs={"composer": record.to_dict()}))


def test_the_constant_metric_warning_waits_for_the_first_complete_trials_and_comes_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="composer")
    study = optuna.create_study(direction="maximize")
    hook = ConstantMetrics(lambda: {"recall@5": 0.5, "ndcg@5": 0.5})
    for i in range(FIRST + 2):
        _complete(study, i, {"recall@5": 0.9 if i < FIRST else 0.1, "ndcg@5": i / 100})
        trials = study.get_trials(deepcopy=False)
        hook(study, trials[-1], trials)
        assert bool(_warnings(caplog, "steers nothing")) == (i >= FIRST - 1)
    (warning,) = _warnings(caplog, "steers nothing")  # once, over the first FIRST trials only
    assert warning.startswith(f"recall@5 kept one value over the first {FIRST} complete trials")
    again = ConstantMetrics(lambda: {"recall@5": 0.5, "ndcg@5": 0.5})  # the study resumed: it was said
    trials = study.get_trials(deepcopy=False)
    again(study, trials[-1], trials)
    assert len(_warnings(caplog, "steers nothing")) == 1


@pytest.mark.slow
def test_a_retrieval_only_system_under_answer_metrics_alone_stops_the_study_with_the_reason(
    corpus: Corpus, questions: QuestionSet, tmp_path: Path
) -> None:
    with pytest.raises(NothingToScore, match=r"no answer\(question, contexts\) method, and the objective "
                                             r"weighs only answer metrics \(token_f1\)"):
        composer.optimize(lambda settings: Shelf([], 0), space={"dimensions": {"shift": {"choices": [0, 1]}}},
                          questions=questions, corpus=corpus, workdir=tmp_path, name="answers", n_trials=2,
                          objective={"metrics": {"answer_correctness": 1}}, pruner="none")


def test_settling_leaves_the_shared_data_as_it_was(
    corpus: Corpus, questions: QuestionSet, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``settle`` gives the data in force and changes nothing: the study's data keeps its resolved
    objective, and its answerless twin is made (and warned about) once."""
    study = optuna.create_study(direction="maximize")
    data = _data(corpus, questions, tmp_path, {"metrics": {"recall": 1, "answer_correctness": 3}})
    with caplog.at_level(logging.WARNING):
        settled = data.settle(study, can_answer=False)
        assert data.settle(study) is settled and settled is not data
    assert set(data.objective.weights) == {"recall@10", "token_f1"}
    assert settled.objective.weights == {"recall@10": 1.0}
    assert settled.space is data.space and settled.judging is data.judging
    assert len(_warnings(caplog, "leave the composite")) == 1
