"""A Composer pipeline as an HTTP service (``composer serve``): see ``create_app`` and ``load_engine``."""

from composer.serve.app import Limits, create_app
from composer.serve.engine import Engine, PipelineEngine, PredictEngine, load_engine

__all__ = ["Engine", "Limits", "PipelineEngine", "PredictEngine", "create_app", "load_engine"]
