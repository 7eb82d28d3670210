"""Datasets: corpora, question sets and retrieval runs, loaded from files or memory with located errors."""

from composer.data.corpus import load_corpus
from composer.data.questions import load_questions, unknown_relevant_ids
from composer.data.readers import SUPPORTED_EXTENSIONS
from composer.data.runs import RunFile, load_run, read_run
from composer.data.types import Corpus, Document, Hit, Question, QuestionSet, Run

__all__ = [
    "SUPPORTED_EXTENSIONS",
    "Corpus",
    "Document",
    "Hit",
    "Question",
    "QuestionSet",
    "Run",
    "RunFile",
    "load_corpus",
    "load_questions",
    "load_run",
    "read_run",
    "unknown_relevant_ids",
]
