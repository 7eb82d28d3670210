"""Answers for a batch of questions from their retrieved hits: the one answering path of ``Pipeline.answer``,
``composer eval`` and every trial of a study."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from composer.data.types import Hit, Question, Run
from composer.generation.extractive import ExtractiveAnswerer
from composer.generation.generator import Answer, Generator
from composer.llm.prompt import prompt_language
from composer.llm.sync import gather_until_failed, run_sync


def contexts_for(hits: Sequence[Hit], corpus_texts: Mapping[str, str] | None, limit: int) -> list[str]:
    """Texts of the first ``limit`` hits that have one, in rank order: what the generator and the judges
    read. A hit without text reads ``corpus_texts`` by its id, else by its document's id."""
    texts: list[str] = []
    for hit in hits:
        text = hit.text
        if text is None and corpus_texts is not None:
            text = corpus_texts.get(hit.id) or (corpus_texts.get(hit.doc_id) if hit.doc_id else None)
        if text and text.strip():
            texts.append(text)
        if len(texts) == limit:
            break
    return texts


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
        passages = contexts_for(run.get(q.id, []), None, generator.max_contexts)
        return q.id, await generator.agenerate(q.question, passages)

    done, _ = await gather_until_failed([one(q) for q in questions], lambda qa: qa[1].failed, max_failures)
    answers = dict(done)
    return {q.id: answers[q.id] for q in questions if q.id in answers}
