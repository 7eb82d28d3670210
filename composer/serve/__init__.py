"""A Composer pipeline as an HTTP service (``composer serve``): see ``create_app`` and ``load_engine``.

The names are imported on first use: a model registered by an earlier Composer pickled its class under
``composer.serve.mlflow_model``, so its pyfunc loader imports this package, and should not pay for FastAPI
(~1 s) to answer a ``predict``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from composer.serve.app import Limits, create_app
    from composer.serve.engine import Engine, PipelineEngine, PredictEngine, load_engine

_WHERE = {"Limits": "app", "create_app": "app", "Engine": "engine", "PipelineEngine": "engine",
          "PredictEngine": "engine", "load_engine": "engine"}

__all__ = ["Engine", "Limits", "PipelineEngine", "PredictEngine", "create_app", "load_engine"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"composer.serve.{_WHERE[name]}"), name)
