"""Composer: find the best RAG configuration for a corpus and question set, Arabic and Persian first-class.

The library (the CLI is a layer over it)::

    import composer
    report = composer.evaluate(my_rag, "questions.jsonl", "corpus.jsonl")   # any system, or a config
    result = composer.optimize(make_rag, space={...}, questions=..., n_trials=30)
    pipe = composer.load_pipeline("best.yaml", "corpus.jsonl"); pipe.ask("...")

Names resolve on first use: ``import composer`` imports nothing heavy (no torch, litellm, MLflow, Optuna).
The package is typed (``py.typed``): ``composer.protocols`` holds the shapes of a user's system
(``Retriever``, ``RAGSystem``, ``Runnable``, ``System``, ``SystemFactory``) for a type checker, and
``composer.options`` the keys ``optimize`` takes; ``ExperimentConfig``, ``ObjectiveConfig`` and
``SearchSpace`` are an experiment file's models.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from composer.api import evaluate, load_pipeline, optimize, optimize_prompt
    from composer.cost.estimate import Estimate
    from composer.data.types import Corpus, Document, Hit, Question, QuestionSet, Turn
    from composer.errors import ComposerError, ConfigError, InputError
    from composer.evaluation.report import EvaluationReport
    from composer.generation.generator import Answer
    from composer.objective import ObjectiveConfig
    from composer.pipeline.config import PipelineConfig
    from composer.pipeline.pipeline import Pipeline
    from composer.prompt_tuning.result import PromptOptimization
    from composer.prompts import UserPrompt
    from composer.protocols import RAGSystem, Retriever, Runnable
    from composer.secrets import allow_env
    from composer.study.experiment import ExperimentConfig
    from composer.study.space import SearchSpace
    from composer.study.study import StudyResult

_EXPORTS = {
    "evaluate": "composer.api",
    "optimize": "composer.api",
    "optimize_prompt": "composer.api",
    "load_pipeline": "composer.api",
    "StudyResult": "composer.study.study",
    "ExperimentConfig": "composer.study.experiment",
    "SearchSpace": "composer.study.space",
    "ObjectiveConfig": "composer.objective",
    "Estimate": "composer.cost.estimate",
    "EvaluationReport": "composer.evaluation.report",
    "Pipeline": "composer.pipeline.pipeline",
    "PipelineConfig": "composer.pipeline.config",
    "Answer": "composer.generation.generator",
    "Corpus": "composer.data.types",
    "Document": "composer.data.types",
    "Hit": "composer.data.types",
    "Question": "composer.data.types",
    "QuestionSet": "composer.data.types",
    "Turn": "composer.data.types",
    "UserPrompt": "composer.prompts",
    "PromptOptimization": "composer.prompt_tuning.result",
    "ComposerError": "composer.errors",
    "ConfigError": "composer.errors",
    "InputError": "composer.errors",
    "Retriever": "composer.protocols",
    "RAGSystem": "composer.protocols",
    "Runnable": "composer.protocols",
    "allow_env": "composer.secrets",
}

__all__ = [
    "Answer",
    "ComposerError",
    "ConfigError",
    "Corpus",
    "Document",
    "Estimate",
    "EvaluationReport",
    "ExperimentConfig",
    "Hit",
    "InputError",
    "ObjectiveConfig",
    "Pipeline",
    "PipelineConfig",
    "PromptOptimization",
    "Question",
    "QuestionSet",
    "RAGSystem",
    "Retriever",
    "Runnable",
    "SearchSpace",
    "StudyResult",
    "Turn",
    "UserPrompt",
    "allow_env",
    "evaluate",
    "load_pipeline",
    "optimize",
    "optimize_prompt",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'composer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
