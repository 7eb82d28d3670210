"""A batch's metric columns: retrieval metrics at every cutoff, context size and deterministic answer scores
for each question of a ranking. The "score a batch" half of every evaluation (``scoring.score_pipeline``
produces the batches; ``given.evaluate_ranking`` scores a ranking file in one batch)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from composer.data.ranking import Ranking
from composer.data.types import Corpus, Question
from composer.errors import InputError
from composer.evaluation.report import SampleTable
from composer.evaluation.table import conversation_columns
from composer.metrics.matching import MatchMode, Universe, match_ranking
from composer.metrics.refusal import is_refusal
from composer.metrics.retrieval import RETRIEVAL_METRICS, metric_key
from composer.metrics.rewrite import REWRITE_SIMILARITY, rewrite_similarities
from composer.metrics.scorers import AnswerScorer, default_scorers

REFUSAL_RATE = "answer_refusal_rate"


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
    searched: Mapping[str, str] | None = None,
) -> SampleTable:
    """Retrieval metrics at every cutoff for each row of ``ranking`` (row i is ``questions[i]``), the
    retrieved context size, and, with ``answers``, the deterministic answer scores.

    ``universe`` is the whole searched collection (answer mode counts its answer-bearing items as
    relevant); ``contexts`` are the passages each answer was given (default: its retrieved texts);
    ``searched``: the query searched per question id, scored against gold rewrites (default: the question).
    """
    cutoffs = check_ks(ks)
    n = len(questions)
    matched = match_ranking(questions, ranking, mode, corpus=corpus, universe=universe)
    metrics: dict[str, np.ndarray] = {}
    for name, fn in RETRIEVAL_METRICS.items():
        for k in cutoffs:
            metrics[metric_key(name, k)] = np.where(
                matched.labelled, fn(matched.relevant, matched.n_relevant, k), np.nan
            )
    rewrites = rewrite_similarities(questions, searched)
    if rewrites is not None:
        metrics[REWRITE_SIMILARITY] = rewrites
    kept = ranking.top(cutoffs[-1])
    table = SampleTable(
        question_ids=tuple(q.id for q in questions),
        questions=tuple(q.question for q in questions),
        metrics=metrics,
        context_tokens=_context_tokens(ranking),
        retrieved=kept,
        skipped={"retrieval": [None if labelled else "no_labels" for labelled in matched.labelled.tolist()]}
        if not matched.labelled.all()
        else {},
    )
    talk = conversation_columns(questions)
    if talk is not None:
        table.conversations, table.turns, table.follow_ups = talk
    queries = tuple(searched.get(q.id, q.question) for q in questions) if searched else None
    if queries is not None and (talk is not None or queries != table.questions):
        table.searched = queries
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
    """Grade each answer. A refusal counts toward the refusal rate (and as skipped: ``refusal``), is not
    graded as a hallucination, and scores 0 on the answer-quality metrics of an answerable question (the
    scorers decide, ``unscorable``): left out, refusing would raise their means."""
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
            skip("answer", row, "refusal")  # counted once, not again under each scorer
        given = contexts.get(q.id) if contexts is not None else None
        passages = list(given) if given is not None else [h.text for h in ranking.hits(row) if h.text]
        for scorer in scorers:
            score = scorer.score(q, answer, passages, q.gold_answers)
            if score.score is not None:
                columns[scorer.name][row] = score.score
            elif not refused:
                skip(scorer.name, row, score.reason)
    table.metrics.update(columns)
    table.skipped.update(skipped)
    table.answers = texts
