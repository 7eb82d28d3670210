"""Answers for a batch of questions from their retrieved passages: the one answering path of
``Pipeline.answer``, ``composer eval`` and every trial of a study."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from composer.data.types import Hit, Question
from composer.generation.extractive import ExtractiveAnswerer
from composer.generation.generator import Answer, Generator
from composer.llm.prompt import prompt_language
from composer.llm.sync import gather_until_failed, run_sync


def contexts_for(hits: Sequence[Hit], limit: int) -> list[str]:
    """Texts of the first ``limit`` hits that have one, in rank order: what an answerer reads."""
    texts: list[str] = []
    for hit in hits:
        if hit.text and hit.text.strip():
            texts.append(hit.text)
        if len(texts) == limit:
            break
    return texts


def answer_questions(
    questions: Sequence[Question],
    contexts: Sequence[Sequence[str]],
    generator: Generator | None = None,
    *,
    max_failures: int | None = None,
    on_answer: Callable[[int], None] | None = None,
) -> dict[str, Answer]:
    """Question id -> Answer from ``contexts[i]`` (question i's passages, best first). With a generator
    every question is answered by the LLM, concurrently within its client's bound; without one, by the
    offline extractive answerer (``Answer.result`` None). ``on_answer(n)`` counts answers as they come.

    A failed generation is an Answer with ``text`` None (its ``result`` says why), never an exception.
    With ``max_failures``, generation stops as soon as more answers than that have failed: the calls
    still pending are cancelled (not paid for) and their questions are missing from the result.
    """
    if generator is None:
        extractive = ExtractiveAnswerer()
        out = {
            q.id: Answer(extractive.answer(q.question, c), prompt_language(q.question), None, tuple(c))
            for q, c in zip(questions, contexts, strict=True)
        }
        if on_answer is not None and out:
            on_answer(len(out))
        return out
    return run_sync(_generate(generator, questions, contexts, max_failures, on_answer))


async def _generate(
    generator: Generator,
    questions: Sequence[Question],
    contexts: Sequence[Sequence[str]],
    max_failures: int | None,
    on_answer: Callable[[int], None] | None,
) -> dict[str, Answer]:
    async def one(q: Question, passages: Sequence[str]) -> tuple[str, Answer]:
        answer = await generator.agenerate(q.question, passages, q.history)
        if on_answer is not None:
            on_answer(1)
        return q.id, answer

    calls = [one(q, c) for q, c in zip(questions, contexts, strict=True)]
    done, _ = await gather_until_failed(calls, lambda qa: qa[1].failed, max_failures)
    answers = dict(done)
    return {q.id: answers[q.id] for q in questions if q.id in answers}
