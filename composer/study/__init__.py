"""Optuna studies over pipeline configurations: search spaces, the composite objective, MLflow records."""

from composer.study.experiment import ExperimentConfig, load_experiment
from composer.study.space import SearchSpace
from composer.study.space_file import load_search_space
from composer.study.study import StudyResult, run_study

__all__ = [
    "ExperimentConfig",
    "SearchSpace",
    "StudyResult",
    "load_experiment",
    "load_search_space",
    "run_study",
]
