"""Datasets: corpora, question sets and ranking files, loaded from files or memory with located errors."""

from composer.data.corpus import load_corpus
from composer.data.questions import load_questions, unknown_relevant_ids
from composer.data.ranking_file import RankingFile, load_ranking_file, read_ranking_file
from composer.data.readers import SUPPORTED_EXTENSIONS
from composer.data.types import Corpus, Document, Hit, HitLists, Question, QuestionSet, Turn

__all__ = [
    "SUPPORTED_EXTENSIONS",
    "Corpus",
    "Document",
    "Hit",
    "HitLists",
    "Question",
    "QuestionSet",
    "RankingFile",
    "Turn",
    "load_corpus",
    "load_questions",
    "load_ranking_file",
    "read_ranking_file",
    "unknown_relevant_ids",
]
