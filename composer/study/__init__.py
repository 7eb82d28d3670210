"""Optuna studies over pipeline configurations: experiments, search spaces, the trial function, what became
of each trial, the held-out verdict, export."""

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
