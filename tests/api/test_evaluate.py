"""evaluate_ranking: trec_eval's ordering, missing and unknown questions, skips, answers, trec_eval parity."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from composer.data import (
    Corpus,
    Document,
    Hit,
    Question,
    QuestionSet,
    load_corpus,
    load_questions,
    load_ranking_file,
)
from composer.errors import InputError
from composer.evaluation import evaluate_ranking

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arcd-sample"


def _questions(*questions: Question) -> QuestionSet:
    return QuestionSet(list(questions), "mem")


def test_ties_are_broken_like_trec_eval() -> None:
    # Equal scores: trec_eval ranks the larger id first, whatever order the run lists them in.
    qs = _questions(Question("q1", "?", relevant_ids=("d2",)))
    report = evaluate_ranking(qs, {"q1": [Hit("d1", 1.0), Hit("d2", 1.0), Hit("d0", 3.0)]}, ks=(1, 2))
    assert [h.id for h in report.samples[0].retrieved] == ["d0", "d2"]  # cut at the deepest k
    assert report.summary()["metrics"]["mrr@2"] == 0.5
    assert report.summary()["metrics"]["hit_rate@1"] == 0.0


def test_missing_and_unknown_questions_are_counted(caplog: pytest.LogCaptureFixture) -> None:
    qs = _questions(Question("q1", "?", relevant_ids=("d1",)), Question("q2", "?", relevant_ids=("d1",)))
    run = {"q1": [Hit("d1", 1.0)], "stray": [Hit("d1", 1.0)], "stray2": []}
    with caplog.at_level(logging.WARNING, logger="composer"):
        report = evaluate_ranking(qs, run, ks=(1,))
    summary = report.summary()
    assert summary["n_questions"] == 2
    assert summary["metrics"]["hit_rate@1"] == 0.5  # q2 retrieved nothing: 0, not skipped
    assert summary["n_scored"]["hit_rate@1"] == 2
    assert summary["questions_missing_from_run"] == 1
    assert summary["run_questions_ignored"] == 2
    assert "1 questions are missing from the run" in caplog.text
    assert "2 questions in the run are not in the question set" in caplog.text


def test_questions_without_labels_are_skipped_not_zero() -> None:
    qs = _questions(Question("q1", "?", relevant_ids=("d1",)), Question("q2", "?"))
    report = evaluate_ranking(qs, {"q1": [Hit("d1", 1.0)], "q2": [Hit("d1", 1.0)]}, ks=(1,), match="document")
    summary = report.summary()
    assert summary["metrics"]["recall@1"] == 1.0
    assert summary["n_scored"]["recall@1"] == 1
    assert summary["skipped"] == {"no_labels": 1}
    assert report.samples[1].metrics["recall@1"] is None
    assert report.samples[1].skipped == {"retrieval": "no_labels"}


def test_cutoffs_are_sorted_deduplicated_and_validated() -> None:
    qs = _questions(Question("q1", "?", relevant_ids=("d1",)))
    assert evaluate_ranking(qs, {}, ks=(5, 1, 5)).ks == (1, 5)
    with pytest.raises(InputError) as err:
        evaluate_ranking(qs, {}, ks=(0, 3))
    assert err.value.field == "k"


def test_texts_come_from_the_corpus_and_context_is_measured() -> None:
    corpus = Corpus([Document("d1", "one two three"), Document("d2", "four five")], "mem")
    qs = _questions(Question("q1", "?", relevant_ids=("d1",)))
    run = {"q1": [Hit("d1", 2.0), Hit("d2", 1.0, text="own text"), Hit("d3", 0.5)]}
    sample = evaluate_ranking(qs, run, ks=(3,), corpus=corpus).samples[0]
    assert [h.text for h in sample.retrieved] == ["one two three", "own text", None]
    assert sample.context_tokens == 5


def test_answers_are_scored_counted_or_skipped() -> None:
    qs = _questions(
        *(
            Question(qid, "ما عاصمة مصر؟", relevant_ids=("d1",), reference_answer="القاهرة")
            for qid in ("good", "wrong", "empty", "refused", "unanswered")
        )
    )
    corpus = Corpus([Document("d1", "القاهرة هي عاصمة مصر")], "mem")
    run = {q.id: [Hit("d1", 1.0)] for q in qs}
    answers = {"good": "القاهره", "wrong": "الإسكندرية", "empty": "  ", "refused": "لا أعرف"}
    report = evaluate_ranking(qs, run, ks=(1,), corpus=corpus, answers=answers)
    by_id = {s.question_id: s for s in report.samples}

    assert by_id["good"].metrics["exact_match"] == 1.0  # normalized: ة and ه fold together
    assert by_id["good"].metrics["token_f1"] == 1.0
    assert by_id["good"].metrics["faithfulness_overlap"] == 1.0
    assert by_id["wrong"].metrics["exact_match"] == 0.0
    assert by_id["wrong"].metrics["faithfulness_overlap"] == 0.0
    assert by_id["empty"].skipped == {"answer": "empty_answer"}
    assert by_id["empty"].metrics["token_f1"] is None
    assert by_id["refused"].skipped == {"answer": "refusal"}
    assert by_id["refused"].metrics["faithfulness_overlap"] is None  # a refusal is no hallucination
    assert by_id["refused"].metrics["token_f1"] == 0.0  # but it did not answer an answerable question
    assert by_id["unanswered"].skipped == {"answer": "no_answer"}

    summary = report.summary()
    assert summary["metrics"]["answer_refusal_rate"] == pytest.approx(1 / 3)  # of the 3 non-empty answers
    assert summary["metrics"]["exact_match"] == pytest.approx(1 / 3)
    assert summary["n_scored"]["token_f1"] == 3
    assert summary["skipped"] == {"empty_answer": 1, "refusal": 1, "no_answer": 1}
    assert summary["metrics"]["hit_rate@1"] == 1.0


def test_example_run_matches_trec_eval() -> None:
    """End to end against pytrec_eval on the bundled example: ordering, cutoffs and means all agree."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    corpus = load_corpus(EXAMPLE / "corpus.jsonl")
    questions = load_questions(EXAMPLE / "questions.jsonl", corpus=corpus)
    run = load_ranking_file(EXAMPLE / "bm25-run.jsonl")
    ks = (1, 3, 5, 10)
    summary = evaluate_ranking(questions, run, ks=ks, corpus=corpus).summary()["metrics"]

    qrels = {q.id: dict.fromkeys(q.relevant_ids, 1) for q in questions}
    trec_run = {qid: {h.id: h.score for h in hits} for qid, hits in run.items()}
    measures = {"recip_rank", "success.1,3,5,10", "P.1,3,5,10", "recall.1,3,5,10", "ndcg_cut.1,3,5,10"}
    per_query = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(trec_run)

    def mean(measure: str) -> float:
        return sum(m[measure] for m in per_query.values()) / len(questions)

    for k in ks:
        assert summary[f"hit_rate@{k}"] == pytest.approx(mean(f"success_{k}"), abs=1e-9)
        assert summary[f"precision@{k}"] == pytest.approx(mean(f"P_{k}"), abs=1e-9)
        assert summary[f"recall@{k}"] == pytest.approx(mean(f"recall_{k}"), abs=1e-9)
        assert summary[f"ndcg@{k}"] == pytest.approx(mean(f"ndcg_cut_{k}"), abs=1e-9)
    assert summary["mrr@10"] == pytest.approx(mean("recip_rank"), abs=1e-9)  # runs hold at most 10 hits
