"""A pipeline's answers from its ranking, memoized in the workspace: a trial that retrieved what an
earlier one did answers without a call."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING

from composer.data.ranking import Ranking
from composer.data.types import Question
from composer.generation import Answer, Generator, answer_questions, contexts_for

if TYPE_CHECKING:
    from composer.generation.config import GenerationConfig

AnswerHook = Callable[[int], None]
"""``hook(n)``: n more questions answered (for live progress while a slow LLM answers)."""


def memoized_answers(
    questions: Iterable[Question],
    ranking: Ranking,
    generation: GenerationConfig,
    generator: Generator | None,
    memo: dict[Hashable, Answer],
    *,
    max_failures: int | None = None,
    on_answer: AnswerHook | None = None,
) -> dict[str, Answer]:
    """Question id -> Answer from the question's top ``generation.max_contexts`` chunks in ``ranking``
    (see ``Pipeline.answer``), looked up in ``memo`` per (answerer, question, history, contexts) first; a new
    answer that did not fail is kept there."""
    items = list(questions)
    rows = {qid: row for row, qid in enumerate(ranking.question_ids)}
    limit = generation.max_contexts
    contexts = [tuple(contexts_for(ranking.hits(rows[q.id]), limit)) for q in items]
    answerer = generation.model_dump_json(exclude={"api_key_env", "max_contexts"})
    slots = [(answerer, q.question, q.history, c) for q, c in zip(items, contexts, strict=True)]
    out = {q.id: memo[s] for q, s in zip(items, slots, strict=True) if s in memo}
    todo = [(q, c, s) for q, c, s in zip(items, contexts, slots, strict=True) if q.id not in out]
    if out and on_answer is not None:
        on_answer(len(out))
    fresh = answer_questions(
        [q for q, _, _ in todo],
        [c for _, c, _ in todo],
        generator,
        max_failures=max_failures,
        on_answer=on_answer,
    )
    for q, _, slot in todo:
        answer = fresh.get(q.id)
        if answer is None:
            continue  # cancelled: the failure budget ran out
        if not answer.failed:
            memo[slot] = answer
        out[q.id] = answer
    return {q.id: out[q.id] for q in items if q.id in out}
