"""Score rankings (and optionally answers) against a question set: the core of `composer eval` and of every
trial of a study.

``score_ranking`` takes a ``Ranking`` (arrays over a chunk table, as the pipeline produces) and returns
columns; ``evaluate_run`` turns any system's run (hit lists) into one first, so both go through the same
judging and metric code.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np

from composer.data.ranking import ChunkTable, Ranking, ranking_from_run
from composer.data.types import Corpus, Question, QuestionSet, Run
from composer.errors import InputError
from composer.evaluation.report import EvaluationReport, SampleTable
from composer.metrics.matching import MatchMode, Universe, default_match_mode, document_of, judge_ranking
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
    answers: Mapping[str, str] | None = None,
    scorers: Sequence[AnswerScorer] | None = None,
    meta: Mapping[str, object] | None = None,
) -> EvaluationReport:
    """Score every question of ``questions`` on the hits ``run`` retrieved for it.

    The run is re-sorted the way trec_eval does (score desc, ties by id desc) so numbers match it.
    Questions the run lacks retrieved nothing and score 0; run entries for unknown questions are ignored
    and counted. Questions without labels are skipped and counted, never averaged in as 0.
    With ``answers``, the deterministic answer scorers (or ``scorers``) grade each answer against the gold
    answers and the retrieved texts; empty answers and refusals are counted instead of scored.
    """
    cutoffs = check_ks(ks)
    mode: MatchMode = match or default_match_mode(questions, corpus)
    known = {q.id for q in questions}
    ignored = sum(qid not in known for qid in run)
    missing = sum(q.id not in run for q in questions)
    if ignored:
        logger.warning("%d questions in the run are not in the question set: ignored", ignored)
    if missing:
        logger.warning("%d questions are missing from the run: scored as retrieving nothing", missing)
    items = list(questions)
    ranking = ranking_from_run(run, [q.id for q in items], run_table(run, corpus))
    table = score_ranking(
        items, ranking, ks=cutoffs, mode=mode, corpus=corpus, answers=answers, scorers=scorers
    )
    info: dict[str, object] = {
        "questions": questions.source,
        "questions_fingerprint": questions.fingerprint(),
        "run_questions_ignored": ignored,
        "questions_missing_from_run": missing,
    }
    if corpus is not None:
        info["corpus"] = corpus.source
    info.update(meta or {})
    return EvaluationReport(table, cutoffs, mode, info)


def run_table(run: Run, corpus: Corpus | None) -> ChunkTable:
    """The distinct items of an external run, with their documents and texts (the hit's own text, else the
    corpus's when the item is a document)."""
    first: dict[str, tuple[str, str]] = {}
    for hits in run.values():
        for h in hits:
            if h.id not in first or (not first[h.id][1] and h.text):
                text = h.text
                if text is None and corpus is not None and (doc := corpus.get(h.id)) is not None:
                    text = doc.text
                first[h.id] = (document_of(h, corpus, None), text or "")
    return ChunkTable(tuple(first), tuple(d for d, _ in first.values()), tuple(t for _, t in first.values()))


def score_ranking(
    questions: Sequence[Question],
    ranking: Ranking,
    *,
    ks: Sequence[int],
    mode: MatchMode,
    corpus: Corpus | None = None,
    universe: Universe | None = None,
    answers: Mapping[str, str | None] | None = None,
    contexts: Mapping[str, Sequence[str]] | None = None,
    scorers: Sequence[AnswerScorer] | None = None,
) -> SampleTable:
    """Retrieval metrics at every cutoff for each row of ``ranking`` (row i is ``questions[i]``), the
    retrieved context size, and, with ``answers``, the deterministic answer scores.

    ``universe`` is the whole searched collection (answer mode counts its answer-bearing items as
    relevant); ``contexts`` are the passages each answer was given (default: its retrieved texts).
    """
    cutoffs = check_ks(ks)
    n = len(questions)
    judged = judge_ranking(questions, ranking, mode, corpus=corpus, universe=universe)
    metrics: dict[str, np.ndarray] = {}
    for name, fn in RETRIEVAL_METRICS.items():
        for k in cutoffs:
            metrics[metric_key(name, k)] = np.where(
                judged.labelled, fn(judged.relevant, judged.n_relevant, k), np.nan
            )
    kept = ranking.top(cutoffs[-1])
    table = SampleTable(
        question_ids=tuple(q.id for q in questions),
        questions=tuple(q.question for q in questions),
        metrics=metrics,
        context_tokens=_context_tokens(ranking),
        retrieved=kept,
        skipped={"retrieval": [None if labelled else "no_labels" for labelled in judged.labelled.tolist()]}
        if not judged.labelled.all()
        else {},
    )
    if answers is not None:
        _score_answers(
            table,
            questions,
            kept,
            answers,
            contexts,
            list(scorers) if scorers is not None else default_scorers(),
        )
    assert len(table) == n
    return table


def check_ks(ks: Sequence[int]) -> tuple[int, ...]:
    cutoffs = tuple(sorted(set(ks)))
    if not cutoffs or cutoffs[0] < 1:
        raise InputError(f"cutoffs must be positive integers, got {list(ks)}", field="k")
    return cutoffs


def _context_tokens(ranking: Ranking) -> np.ndarray | None:
    """Whitespace tokens of each question's retrieved texts: a cheap, model-independent measure of the
    context retrieved, counted over the ranking's whole depth (a trial's k): what a generator would read.
    NaN for a question none of whose items has a text, None when no item has one."""
    words = ranking.table.word_counts
    if (words < 0).all():
        return None
    per_item = np.where(ranking.items >= 0, words[np.maximum(ranking.items, 0)], -1)
    counts = np.where(per_item >= 0, per_item, 0).sum(axis=1).astype(np.float64)
    return np.where((per_item >= 0).any(axis=1), counts, np.nan)


def _score_answers(
    table: SampleTable,
    questions: Sequence[Question],
    ranking: Ranking,
    answers: Mapping[str, str | None],
    contexts: Mapping[str, Sequence[str]] | None,
    scorers: Sequence[AnswerScorer],
) -> None:
    """Grade each answer; a refusal counts toward the refusal rate and is not graded as a hallucination."""
    n = len(questions)
    columns = {name: np.full(n, np.nan) for name in (REFUSAL_RATE, *(s.name for s in scorers))}
    skipped: dict[str, list[str | None]] = {}
    texts: list[str | None] = []

    def skip(group: str, row: int, reason: str) -> None:
        skipped.setdefault(group, [None] * n)[row] = reason

    for row, q in enumerate(questions):
        answer = answers.get(q.id)
        texts.append(answer)
        if answer is None or not answer.strip():
            skip("answer", row, "no_answer" if answer is None else "empty_answer")
            continue
        refused = is_refusal(answer)
        columns[REFUSAL_RATE][row] = float(refused)
        if refused:
            skip("answer", row, "refusal")
            continue
        given = contexts.get(q.id) if contexts is not None else None
        passages = list(given) if given is not None else [h.text for h in ranking.hits(row) if h.text]
        for scorer in scorers:
            score = scorer.score(q, answer, passages, q.gold_answers)
            if score.score is None:
                skip(scorer.name, row, score.reason)
            else:
                columns[scorer.name][row] = score.score
    table.metrics.update(columns)
    table.skipped.update(skipped)
    table.answers = texts
