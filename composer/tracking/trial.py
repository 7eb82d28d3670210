"""``TrialLog``: what the MLflow writer receives when a study's trial ends.

Here, with the writer that reads it, so tracking depends on no study module: the study builds one per
trial (``composer.study.runner``) and hands it over, through the spool when the writer runs apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from composer.evaluation.report import EvaluationReport
    from composer.pipeline.config import PipelineConfig


@dataclass
class TrialLog:
    """What the MLflow writer records for one trial, whatever its end: a nested run with params, metrics,
    tags, the report (so far, for a pruned trial) as artifacts, and traces."""

    number: int
    config: PipelineConfig | Mapping[str, Any] | None
    started: datetime
    state: str = "RUNNING"
    metrics: Mapping[str, float] = field(default_factory=dict)
    steps: list[float] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    report: EvaluationReport | None = None
    answerer: str = "extractive"
    judge: str | None = None
    error_rates: Mapping[str, Any] | None = None  # error_rates.json of a trial that failed before a report
    generation: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per traced question: how its answer was generated (model, template, tokens, cache, failure)."""

    @property
    def config_dict(self) -> dict[str, Any] | None:
        if self.config is None:
            return None
        to_dict = getattr(self.config, "to_dict", None)
        return dict(to_dict() if to_dict is not None else self.config)
