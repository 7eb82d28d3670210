"""Score a retrieval run (and optionally answers) against a question set: the core of `composer eval`."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from composer.data.types import Corpus, Hit, Question, QuestionSet, Run
from composer.errors import InputError
from composer.evaluation.report import EvaluationReport, SampleRecord
from composer.metrics.matching import MatchMode, Universe, default_match_mode, judge, trec_order
from composer.metrics.refusal import is_refusal
from composer.metrics.retrieval import RETRIEVAL_METRICS, metric_key
from composer.metrics.scorers import AnswerScorer, default_scorers

logger = logging.getLogger(__name__)

REFUSAL_RATE = "answer_refusal_rate"


def evaluate_run(
    questions: QuestionSet,
    run: Run,
    *,
    ks: Sequence[int] = (1, 3, 5, 10),
    match: MatchMode | None = None,
    corpus: Corpus | None = None,
    universe: Universe | None = None,
    answers: Mapping[str, str] | None = None,
    scorers: Sequence[AnswerScorer] | None = None,
    latency: Mapping[str, Mapping[str, float]] | None = None,
    meta: Mapping[str, object] | None = None,
) -> EvaluationReport:
    """Score every question of ``questions`` on the hits ``run`` retrieved for it.

    The run is re-sorted the way trec_eval does (score desc, ties by id desc) so numbers match it.
    Questions the run lacks retrieved nothing and score 0; run entries for unknown questions are ignored
    and counted. Questions without labels are skipped and counted, never averaged in as 0.
    With ``answers``, the deterministic answer scorers (or ``scorers``) grade each answer against the gold
    answers and the retrieved texts; empty answers and refusals are counted instead of scored.
    """
    cutoffs = _check_ks(ks)
    mode: MatchMode = match or default_match_mode(questions, corpus)
    answer_scorers = list(scorers) if scorers is not None else default_scorers()
    known = {q.id for q in questions}
    ignored = sum(qid not in known for qid in run)
    missing = sum(q.id not in run for q in questions)
    if ignored:
        logger.warning("%d questions in the run are not in the question set: ignored", ignored)
    if missing:
        logger.warning("%d questions are missing from the run: scored as retrieving nothing", missing)

    samples = []
    for q in questions:
        hits = trec_order(run.get(q.id, []))
        full = _with_text(hits, corpus, universe)
        record = SampleRecord(q.id, q.question, retrieved=full[: cutoffs[-1]])
        if latency is not None and q.id in latency:
            record.latency.update(latency[q.id])
        _score_retrieval(record, q, hits, mode, cutoffs, corpus, universe)
        if any(h.text for h in full):
            record.context_tokens = context_tokens(h.text for h in full if h.text)
        if answers is not None:
            _score_answer(record, q, answers.get(q.id), answer_scorers)
        samples.append(record)

    info: dict[str, object] = {
        "questions": questions.source,
        "questions_fingerprint": questions.fingerprint(),
        "run_questions_ignored": ignored,
        "questions_missing_from_run": missing,
    }
    if corpus is not None:
        info["corpus"] = corpus.source
    info.update(meta or {})
    return EvaluationReport(samples, cutoffs, mode, info)


def context_tokens(texts: Iterable[str]) -> int:
    """Whitespace tokens of the texts: a cheap, model-independent measure of the context retrieved.

    Counted over every hit of the run (the trial's whole k), so it measures what a generator would read.
    """
    return sum(len(t.split()) for t in texts)


def _check_ks(ks: Sequence[int]) -> tuple[int, ...]:
    cutoffs = tuple(sorted(set(ks)))
    if not cutoffs or cutoffs[0] < 1:
        raise InputError(f"cutoffs must be positive integers, got {list(ks)}", field="k")
    return cutoffs


def _with_text(hits: list[Hit], corpus: Corpus | None, universe: Universe | None) -> list[Hit]:
    """Missing hit texts from the universe or corpus: traces and answer scorers see what was retrieved."""
    out = []
    for h in hits:
        text = h.text
        if text is None and universe is not None and h.id in universe:
            text = universe[h.id][1]
        if text is None and corpus is not None and (doc := corpus.get(h.id)) is not None:
            text = doc.text
        out.append(h if text is h.text else replace(h, text=text))
    return out


def _score_retrieval(
    record: SampleRecord,
    question: Question,
    hits: list[Hit],
    mode: MatchMode,
    cutoffs: tuple[int, ...],
    corpus: Corpus | None,
    universe: Universe | None,
) -> None:
    judged = judge(question, hits, mode, corpus=corpus, universe=universe)
    if judged is None:
        record.skipped["retrieval"] = "no_labels"
    for name, fn in RETRIEVAL_METRICS.items():
        for k in cutoffs:
            value = None if judged is None else fn(judged.ranked, judged.relevant, k)
            record.metrics[metric_key(name, k)] = value


def _score_answer(
    record: SampleRecord, question: Question, answer: str | None, scorers: Sequence[AnswerScorer]
) -> None:
    """Grade one answer; a refusal counts toward the refusal rate and is not graded as a hallucination."""
    record.answer = answer
    if answer is None or not answer.strip():
        record.metrics[REFUSAL_RATE] = None
        _skip_answer(record, "no_answer" if answer is None else "empty_answer", scorers)
        return
    refused = is_refusal(answer)
    record.metrics[REFUSAL_RATE] = float(refused)
    if refused:
        _skip_answer(record, "refusal", scorers)
        return
    contexts = [h.text for h in record.retrieved if h.text]
    for scorer in scorers:
        score = scorer.score(question, answer, contexts, question.gold_answers)
        record.metrics[scorer.name] = score.score
        if score.score is None:
            record.skipped[scorer.name] = score.reason


def _skip_answer(record: SampleRecord, reason: str, scorers: Sequence[AnswerScorer]) -> None:
    record.skipped["answer"] = reason
    record.metrics.update({s.name: None for s in scorers})
