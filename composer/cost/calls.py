"""The LLM requests one configuration sends for one question, built with the prompts the pipeline and the
judges send (a follow-up's rewrite, query expansion, LLM reranking, generation, each judge), for a cost
estimate.

What is not known before a run stands in for itself: the retrieved passages are the question's own
documents first, then others, cut by the configuration's chunking; the answer is the reference answer
(with the question around it for the grounded template); each reply is the JSON its parser expects.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from composer.data.types import Question
from composer.generation.generator import answer_messages
from composer.generation.prompts import REFUSALS
from composer.judges.base import is_atomic
from composer.judges.own_prompts import verdict_messages
from composer.judges.panel import JudgeSettings
from composer.judges.prompts import (
    CONTEXT_PRECISION,
    CONTEXT_RECALL,
    CORRECTNESS,
    FAITHFULNESS,
    RATING,
    RELEVANCY,
    STATEMENTS,
)
from composer.llm.cache import cache_key
from composer.llm.config import LLMConfig, helper_config
from composer.llm.prompt import (
    Localized,
    PromptLanguage,
    conversation_language,
    numbered,
    prompt_language,
    transcript,
)
from composer.metrics.scorers import references
from composer.pipeline.config import PipelineConfig
from composer.prompts.spec import UserPrompt
from composer.retrieval.conversation import window_turns
from composer.retrieval.prompts import (
    CONDENSE,
    HYDE,
    MULTI_QUERY,
    RERANK_LISTWISE,
    RERANK_POINTWISE,
    STEP_BACK,
)
from composer.text import split_sentences

Messages = list[dict[str, str]]
RERANK_CHARS = 1500
"""Characters of a passage an LLM reranker reads (``LLMReranker.max_chars``)."""


@dataclass(frozen=True)
class Call:
    """One request: its stage, who answers it, its messages and the reply expected. ``answer``: who wrote
    the answer it judges (empty for none). The stand-in answer is the same whoever answers; real answers
    are not: a judge's request about one generator's answer is its own, while one generator is taken to
    answer a question alike from passages that hold the answer."""

    stage: str
    llm: LLMConfig
    messages: Messages
    reply: str
    answer: str = ""


@dataclass(frozen=True)
class Judge:
    """The study's judge: who it calls and how it is told to judge."""

    llm: LLMConfig
    settings: JudgeSettings


def question_calls(
    question: Question, passages: Sequence[str], config: PipelineConfig, llm: LLMConfig | None,
    judge: Judge | None, *, answers: bool,
) -> list[Call]:
    """Every request ``config`` sends for ``question`` (``passages``: what retrieval returns, best first;
    ``answers``: whether trials answer, as ``StudyData.answers`` says)."""
    generator = config.generation.llm_config(llm)
    helper_base = generator or llm
    calls = _rewrite(question, config, helper_base)
    calls += _expansion(question.question, config, helper_base, passages)
    hits = list(passages[: config.retrieval.k])
    if config.rerank.method == "llm":
        helper = helper_config(helper_base, config.rerank.model)
        if helper is not None:
            calls += _rerank(question.question, hits, config, helper)
    if not answers or generator is None:
        return calls
    contexts = hits[: config.generation.max_contexts]
    prompt = config.generation.prompt if isinstance(config.generation.prompt, UserPrompt) else None
    answer = expected_answer(question, "grounded" if prompt is not None else config.generation.template)
    messages = answer_messages(prompt or config.generation.template, question.question, contexts,
                               question.history)
    calls.append(Call("generation", generator, messages, answer))
    if judge is not None:
        shape = prompt.sha256 if prompt is not None else config.generation.template
        about = cache_key(generator.model, generator.api_base, [], {**generator.call_params(),
                                                                    "template": shape})
        calls += _judged(question, answer, about, contexts, judge)
    return calls


def expected_answer(question: Question, template: str) -> str:
    """What the generator is expected to answer: the reference (the concise template's short phrase), in a
    sentence with the question for the grounded one; the refusal without a reference."""
    refs = references(question, None)
    if not refs:
        return REFUSALS[conversation_language(question.question, question.history)]
    return refs[0] if template == "concise" else f"{question.question} {refs[0]}"


def _rewrite(question: Question, config: PipelineConfig, base: LLMConfig | None) -> list[Call]:
    """The ``llm`` rewrite of a follow-up (a question with no history in its window sends none); its
    stand-in reply is the question itself."""
    conversation = config.conversation
    helper = helper_config(base, conversation.model)
    turns = window_turns(question.history, conversation)
    if conversation.rewrite != "llm" or helper is None or not turns:
        return []
    lang = conversation_language(question.question, turns)
    messages = CONDENSE[lang].messages(history=transcript(turns, lang), question=question.question)
    return [Call("conversation rewrite", helper, messages, _json({"question": question.question}))]


def _expansion(
    question: str, config: PipelineConfig, base: LLMConfig | None, passages: Sequence[str]
) -> list[Call]:
    qe = config.query_expansion
    helper = helper_config(base, None)
    if qe.method == "none" or helper is None or (qe.method == "hyde" and config.retrieval.mode == "bm25"):
        return []
    lang = prompt_language(question)
    if qe.method == "multi_query":
        messages = MULTI_QUERY[lang].messages(question=question, n=str(qe.n))
        reply = _json({"queries": [question] * qe.n})
    elif qe.method == "step_back":
        messages, reply = STEP_BACK[lang].messages(question=question), _json({"question": question})
    else:  # hyde: a passage like the ones it should find
        messages, reply = HYDE[lang].messages(question=question), (passages[0] if passages else question)
    return [Call("query expansion", helper, messages, reply)]


def _rerank(question: str, hits: Sequence[str], config: PipelineConfig, helper: LLMConfig) -> list[Call]:
    head = [" ".join(h.split())[:RERANK_CHARS] for h in hits[: config.rerank.top_n]]
    if len(head) < 2:
        return []
    lang = prompt_language(question)
    if config.rerank.mode == "pointwise":
        return [Call("LLM rerank", helper, RERANK_POINTWISE[lang].messages(question=question, passage=p),
                     _json({"score": 2})) for p in head]
    messages = RERANK_LISTWISE[lang].messages(question=question, passages=numbered(head))
    return [Call("LLM rerank", helper, messages, _json({"ranking": list(range(1, len(head) + 1))}))]


def _judged(question: Question, answer: str, about: str, contexts: Sequence[str], judge: Judge) -> list[Call]:
    """The judges' requests for one answer, each built as its judge builds it (a judge with nothing to
    judge, such as no reference answer, sends none)."""
    q = question.question
    lang = prompt_language(q)
    refs = references(question, None)
    reference = refs[0] if len(refs) == 1 else " / ".join(refs)
    passages = numbered([" ".join(c.split()) for c in contexts if c.strip()]) if contexts else ""
    calls: list[Call] = []
    own = judge.settings.own_templates()

    def ask(metric: str, template: Localized, reply: Any, of_answer: bool = True, **fields: str) -> None:
        messages = verdict_messages(metric, lang, template, own.get(metric), judge.settings.variant,
                                    judge.settings.examples, **fields)
        calls.append(Call(f"judge: {metric}", judge.llm, messages, _json(reply), about if of_answer else ""))

    metrics = judge.settings.metrics
    claims: list[str] = []
    if {"answer_correctness", "faithfulness"}.intersection(metrics):
        claims = _statements(calls, judge, lang, q, answer, about)
    for metric in metrics:
        if metric == "answer_correctness" and refs:
            truths = _statements(calls, judge, lang, q, refs[0], "")
            ask(metric, CORRECTNESS, {"answer": [1] * len(claims), "reference": [1] * len(truths)},
                question=q, answer_statements=numbered(claims, brackets=False),
                reference_statements=numbered(truths, brackets=False))
        elif metric == "faithfulness" and passages:
            ask(metric, FAITHFULNESS, {"verdicts": [1] * len(claims), "reason": q}, contexts=passages,
                statements=numbered(claims, brackets=False))
        elif metric == "llm_judge_rating" and refs:
            ask(metric, RATING, {"rating": 4, "reason": q}, question=q, reference=reference, answer=answer)
        elif metric == "answer_relevancy":
            n = judge.settings.relevancy_questions
            ask(metric, RELEVANCY, {"questions": [q] * n, "noncommittal": 0}, answer=answer, n=str(n))
        elif metric == "context_precision" and passages:
            ask(metric, CONTEXT_PRECISION, {"verdicts": [1] * len(contexts)}, not refs, question=q,
                reference=refs[0] if refs else answer, contexts=passages)
        elif metric == "context_recall" and passages and refs:
            sentences = _sentences(refs[0])
            ask(metric, CONTEXT_RECALL, {"verdicts": [1] * len(sentences)}, False, question=q,
                contexts=passages, sentences=numbered(sentences, brackets=False))
    return calls


def _statements(calls: list[Call], judge: Judge, lang: PromptLanguage, q: str, text: str, about: str
                ) -> list[str]:
    """The text's statements; a request that splits it, unless it is one statement as it stands."""
    if is_atomic(text):
        return [" ".join(text.split())] if text.strip() else []
    sentences = _sentences(text)
    messages = STATEMENTS[lang].messages(question=q, sentences=numbered(sentences, brackets=False))
    reply = _json({"statements": sentences})
    calls.append(Call("judge: statements", judge.llm, messages, reply, about))
    return sentences


def _sentences(text: str) -> list[str]:
    return [" ".join(s.split()) for s in split_sentences(text)]


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
