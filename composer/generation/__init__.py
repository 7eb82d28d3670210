"""Answers from retrieved contexts: the answerer interface, the offline answerer and the LLM generator,
plus the LLM's other query-time jobs: query expansion and reranking."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from composer.data.types import Hit, Question
from composer.generation.answering import answer_questions, contexts_for
from composer.generation.expansion import (
    EXPANSION_METHODS,
    Expansion,
    ExpansionMethod,
    QueryExpander,
    fuse_rankings,
    rrf_fuse,
)
from composer.generation.extractive import ExtractiveAnswerer
from composer.generation.generator import Answer, Generator
from composer.generation.prompts import ANSWER_TEMPLATES, REFUSALS, AnswerTemplate
from composer.generation.rerank import LLMReranker, RerankMode


class Answerer(Protocol):
    """Turns a question and its retrieved hits (in rank order) into an answer string."""

    name: str

    def answer(self, question: Question, hits: Sequence[Hit]) -> str: ...


__all__ = [
    "ANSWER_TEMPLATES",
    "EXPANSION_METHODS",
    "REFUSALS",
    "Answer",
    "AnswerTemplate",
    "Answerer",
    "Expansion",
    "ExpansionMethod",
    "ExtractiveAnswerer",
    "Generator",
    "LLMReranker",
    "QueryExpander",
    "RerankMode",
    "answer_questions",
    "contexts_for",
    "fuse_rankings",
    "rrf_fuse",
]
