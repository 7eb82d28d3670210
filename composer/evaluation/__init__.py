"""Scoring rankings and answers into reports: per-question results, means with CIs, files, terminal tables."""

from composer.evaluation.columns import score_ranking
from composer.evaluation.given import evaluate_ranking
from composer.evaluation.render import render_report
from composer.evaluation.report import EvaluationReport, MetricStats, SampleRecord, SampleTable, StageError
from composer.evaluation.scoring import evaluate_pipeline

__all__ = [
    "EvaluationReport",
    "MetricStats",
    "SampleRecord",
    "SampleTable",
    "StageError",
    "evaluate_pipeline",
    "evaluate_ranking",
    "render_report",
    "score_ranking",
]
