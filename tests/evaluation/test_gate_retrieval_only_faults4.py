"""The Python gate compares a retrieval-only system with a pipeline on the metrics both produce (issue
42): the default objective's answer metrics, which the system cannot score, are left out with a note,
never counted 0 ("significantly worse" for a better retriever); a stated objective is never cut."""

from __future__ import annotations

from pathlib import Path

import pytest

import composer
from composer.data import load_questions
from composer.errors import InputError

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arcd-sample"
QUESTIONS, CORPUS = SAMPLE / "questions.jsonl", SAMPLE / "corpus.jsonl"
BASELINE = {"retrieval": {"mode": "bm25", "k": 10}}


class GoldRetriever:
    """A retriever with no answer method that finds each question's gold documents first: better than
    BM25 at retrieval, with nothing to say about answers."""

    def __init__(self) -> None:
        self.gold = {q.question: list(q.relevant_ids) for q in load_questions(QUESTIONS)}

    def retrieve(self, question: str) -> list[str]:
        return self.gold[question]


def test_a_retrieval_only_system_is_gated_on_the_metrics_both_sides_score(tmp_path: Path) -> None:
    report = composer.evaluate(GoldRetriever(), QUESTIONS, CORPUS, workdir=tmp_path, baseline=BASELINE)
    gate = report.gate
    assert gate is not None
    assert set(gate.weights) == {"recall@10", "ndcg@10"}  # before: exit 2, token_f1 missing on one side
    assert gate.passed and gate.reason.startswith("significantly better")
    assert ("compared on the metrics both sides scored (recall@10, ndcg@10); left out: token_f1 (not scored "
            "by the new system), faithfulness_overlap (not scored by the new system)") in gate.notes
    one = composer.evaluate(GoldRetriever(), QUESTIONS, CORPUS, workdir=tmp_path, baseline=BASELINE,
                            gate_metric="ndcg@10")
    assert one.gate is not None and one.gate.passed and one.gate.difference > 0


def test_a_stated_objective_with_a_metric_one_side_lacks_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="the new system has no value of 'token_f1'"):
        composer.evaluate(GoldRetriever(), QUESTIONS, CORPUS, workdir=tmp_path, baseline=BASELINE,
                          objective={"ndcg@10": 1, "token_f1": 1})
