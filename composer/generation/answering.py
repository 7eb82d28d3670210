"""Answers for a batch of questions from their retrieved hits: the one answering path of ``Pipeline.answer``,
``composer eval`` and every trial of a study."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from composer.data.types import Hit, Question, Run
from composer.generation.extractive import ExtractiveAnswerer
from composer.generation.generator import Answer, Generator
from composer.llm.prompt import prompt_language
from composer.llm.sync import run_sync


def contexts(hits: Sequence[Hit], limit: int) -> list[str]:
    """The texts of the first ``limit`` hits that have one, in rank order: what the generator reads."""
    return [h.text for h in hits if h.text and h.text.strip()][:limit]


def answer_questions(
    questions: Sequence[Question],
    run: Run,
    generator: Generator | None = None,
    *,
    max_failures: int | None = None,
) -> dict[str, Answer]:
    """Question id -> Answer. With a generator every question is answered by the LLM, concurrently within
    its client's bound; without one, by the offline extractive answerer (``Answer.result`` None).

    A failed generation is an Answer with ``text`` None (its ``result`` says why), never an exception.
    With ``max_failures``, generation stops as soon as more answers than that have failed: the calls
    still pending are cancelled (not paid for) and their questions are missing from the result.
    """
    if generator is None:
        extractive = ExtractiveAnswerer()
        return {
            q.id: Answer(extractive.answer(q, run.get(q.id, [])), prompt_language(q.question), None)
            for q in questions
        }
    return run_sync(_generate(generator, questions, run, max_failures))


async def _generate(
    generator: Generator, questions: Sequence[Question], run: Run, max_failures: int | None
) -> dict[str, Answer]:
    async def one(q: Question) -> tuple[str, Answer]:
        passages = contexts(run.get(q.id, []), generator.max_contexts)
        return q.id, await generator.agenerate(q.question, passages)

    tasks = [asyncio.ensure_future(one(q)) for q in questions]
    answers: dict[str, Answer] = {}
    failed = 0
    try:
        for next_done in asyncio.as_completed(tasks):
            qid, answer = await next_done
            answers[qid] = answer
            failed += answer.failed
            if max_failures is not None and failed > max_failures:
                break
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    order = {q.id: i for i, q in enumerate(questions)}
    return dict(sorted(answers.items(), key=lambda item: order[item[0]]))
