"""Answers from retrieved contexts: the one answering path (``answer_questions``), the offline extractive
answerer and the LLM generator."""

from composer.generation.answering import answer_questions, contexts_for
from composer.generation.extractive import ExtractiveAnswerer
from composer.generation.generator import Answer, Generator
from composer.generation.prompts import ANSWER_TEMPLATES, REFUSALS, AnswerTemplate

__all__ = [
    "ANSWER_TEMPLATES",
    "REFUSALS",
    "Answer",
    "AnswerTemplate",
    "ExtractiveAnswerer",
    "Generator",
    "answer_questions",
    "contexts_for",
]
