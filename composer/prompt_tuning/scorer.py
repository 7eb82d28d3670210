"""What the optimizer needs from the study that owns it: a prompt's scores on some questions.

The engine sits below ``study`` in the package order, so it never builds pipelines itself: the study side
(``composer/study/prompt_stage.py``) implements ``PromptScorer`` with the study's own data, winner and
objective, and the engine only sees prompts in and scores out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from composer.data.types import QuestionSet
    from composer.evaluation.report import EvaluationReport
    from composer.objective import Objective
    from composer.prompts import UserPrompt

PASSAGE_CHARS = 300
"""Characters of each passage the reflection model reads about a question (``ScoredPrompt.feedback``)."""
FEEDBACK_PASSAGES = 3
"""Passages the reflection model reads about a question: what the feedback and its cost estimate show."""


@dataclass(frozen=True)
class ScoredPrompt:
    """One prompt scored on some questions, as the study scores a trial."""

    report: EvaluationReport
    """The evaluation (its table feeds the paired bootstrap of the held-out verdict)."""
    composite: float
    """The objective's composite of the report's means: the trial's value, for this prompt."""
    per_question: dict[str, float]
    """Question id -> the objective's composite of that question's own metrics (GEPA's per-example score)."""
    feedback: dict[str, str]
    """Question id -> what the reflection model reads about it: question, reference, answer, its scores."""


class PromptScorer(Protocol):
    """Scores a prompt with the study's winner (its retrieval, model and judges) and objective."""

    @property
    def objective(self) -> Objective: ...

    def __call__(self, prompt: UserPrompt, questions: QuestionSet) -> ScoredPrompt: ...
