"""Scoring runs and answers into reports: per-question records, means with CIs, files, terminal tables."""

from composer.evaluation.evaluate import evaluate_run
from composer.evaluation.pipeline import evaluate_pipeline
from composer.evaluation.render import render_report
from composer.evaluation.report import EvaluationReport, MetricStats, SampleRecord, StageError

__all__ = [
    "EvaluationReport",
    "MetricStats",
    "SampleRecord",
    "StageError",
    "evaluate_pipeline",
    "evaluate_run",
    "render_report",
]
