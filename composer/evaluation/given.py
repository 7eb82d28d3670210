"""Rankings given by any system (hit lists, and answers where it gave them) scored against a question set:
the core of ``composer eval --run`` and of ``composer.evaluate`` on a ranking file.

``evaluate_ranking`` scores the hit lists in one batch with ``columns.score_ranking``; with a judge, they
are wrapped as a ``GivenRanking`` (its hits the ranking, its answers the answers) and go through
``scoring.score_pipeline``, the one scoring path of every pipeline and trial, so the judges, failure
budget, error rates and LLM usage are the same.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from composer.data.ranking import ChunkTable, HitOrder, Ranking, ranking_from_hits
from composer.data.types import Corpus, HitLists, Question, QuestionSet
from composer.evaluation.columns import check_ks, score_ranking
from composer.evaluation.report import EvaluationReport, StageError
from composer.generation import Answer
from composer.llm.client import Result
from composer.llm.prompt import prompt_language
from composer.metrics.matching import MatchMode, default_match_mode, document_of
from composer.metrics.scorers import AnswerScorer

if TYPE_CHECKING:
    from composer.evaluation.judging import Judging

logger = logging.getLogger(__name__)


def evaluate_ranking(
    questions: QuestionSet,
    hits: HitLists,
    *,
    ks: Sequence[int] = (1, 3, 5, 10),
    match: MatchMode | None = None,
    corpus: Corpus | None = None,
    answers: Mapping[str, str] | None = None,
    scorers: Sequence[AnswerScorer] | None = None,
    meta: Mapping[str, object] | None = None,
    order: HitOrder = "auto",
    judging: Judging | None = None,
) -> EvaluationReport:
    """Score every question of ``questions`` on the hits ``hits`` retrieved for it.

    A scored run is re-sorted the way trec_eval does (score desc, ties by id desc) so numbers match it; a
    question whose hits all score alike (a rank-only system) keeps the run's order (``order``: see
    ``HitOrder``).
    Questions the run lacks retrieved nothing and score 0; run entries for unknown questions are ignored
    and counted. Questions without labels are skipped and counted, never averaged in as 0.
    With ``answers``, the deterministic answer scorers (or ``scorers``) grade each answer against the gold
    answers and the retrieved texts; empty answers and refusals are counted instead of scored. With
    ``judging`` the LLM judges grade them too (a question without an answer is then a failed sample).
    """
    cutoffs = check_ks(ks)
    mode: MatchMode = match or default_match_mode(questions, corpus)
    known = {q.id for q in questions}
    ignored = sum(qid not in known for qid in hits)
    missing = sum(q.id not in hits for q in questions)
    if ignored:
        logger.warning("%d questions in the run are not in the question set: ignored", ignored)
    if missing:
        logger.warning("%d questions are missing from the run: scored as retrieving nothing", missing)
    items = list(questions)
    table_of_items = hits_table(hits, corpus)
    if judging is not None:
        from composer.evaluation.scoring import score_pipeline

        given = GivenRanking(hits, answers or {}, table_of_items, order)
        scored = score_pipeline(given, questions, corpus if corpus is not None else Corpus([], "<none>"),
                                judging=judging, ks=cutoffs, match=mode, batch_size=max(len(items), 1))
        return scored.report.with_meta({"run_questions_ignored": ignored,
                                        "questions_missing_from_run": missing, **(meta or {})})
    ranking = ranking_from_hits(hits, [q.id for q in items], table_of_items, order=order)
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


def hits_table(lists: HitLists, corpus: Corpus | None) -> ChunkTable:
    """The distinct items of a ranking file, with their documents and texts (the hit's own text, else the
    corpus's when the item is a document)."""
    first: dict[str, tuple[str, str]] = {}
    for hits in lists.values():
        for h in hits:
            if h.id not in first or (not first[h.id][1] and h.text):
                text = h.text
                if text is None and corpus is not None and (doc := corpus.get(h.id)) is not None:
                    text = doc.text
                first[h.id] = (document_of(h, corpus, None), text or "")
    return ChunkTable(tuple(first), tuple(d for d, _ in first.values()), tuple(t for _, t in first.values()))


NO_ANSWER = "the run gives no answer for this question"


@dataclass
class GivenRanking:
    """A ranking file as a pipeline that has already ranked and answered: nothing to index, no LLM of its
    own."""

    hits: HitLists
    answers: Mapping[str, str]
    table: ChunkTable
    order: HitOrder = "auto"
    searched: float = 0.0
    failed: dict[str, StageError] = field(default_factory=dict)
    answerer: str = "run"
    generator_model: str | None = None
    can_answer: bool = True

    def batched(self, answering: bool) -> bool:
        """Nothing to call per question: the run is scored at once."""
        return False

    def universe(self) -> ChunkTable:
        return self.table

    def rank(self, questions: Sequence[Question]) -> tuple[Ranking, dict[str, np.ndarray]]:
        return ranking_from_hits(self.hits, [q.id for q in questions], self.table, order=self.order), {}

    def answer(
        self,
        questions: Sequence[Question],
        ranking: Ranking,
        *,
        max_failures: int | None = None,
        on_answer: Callable[[int], None] | None = None,
    ) -> dict[str, Answer]:
        """The run's answers, graded against the texts it retrieved; a question it did not answer is a
        failed sample, named as such."""
        out: dict[str, Answer] = {}
        for row, q in enumerate(questions):
            text = self.answers.get(q.id)
            contexts = tuple(h.text for h in ranking.hits(row) if h.text)
            result = None if text is not None else Result(None, "other", NO_ANSWER)
            out[q.id] = Answer(text, prompt_language(q.question), result, contexts)
        if on_answer is not None:
            on_answer(len(out))
        return out
