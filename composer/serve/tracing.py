"""MLflow traces of production requests (``composer serve --trace EXPERIMENT``): one trace per request,
its question and answer (or hits) as inputs and outputs, the pipeline's time and the served model as
attributes, tagged ``composer.served`` so the UI's traces table filters them from a study's."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

from composer.serve.engine import Timed

SERVED_TAG = "composer.served"


class Tracer:
    """Writes each request as a trace into one MLflow experiment (created if missing).

    Args:
        experiment: The experiment's name.
        tracking_uri: The MLflow store (None: MLflow's default, ``$MLFLOW_TRACKING_URI``).
        model: The served model's name, tagged on every trace.
    """

    def __init__(self, experiment: str, tracking_uri: str | None, model: str) -> None:
        import mlflow

        if tracking_uri is not None:
            mlflow.set_tracking_uri(tracking_uri)  # where traces are exported: MLflow's one global store
        client = mlflow.MlflowClient()  # not set_experiment: the process's runs keep their experiment
        found = client.get_experiment_by_name(experiment)
        self.experiment_id = (found.experiment_id if found is not None
                              else client.create_experiment(experiment))
        self.model = model

    def traced(self, kind: str, inputs: Mapping[str, Any], fn: Callable[[], Timed]) -> Timed:
        """``fn()`` inside a root span named ``kind``; a failure is recorded on the span, then raised."""
        import mlflow
        from mlflow.entities import SpanStatusCode, SpanType

        span = mlflow.start_span_no_context(
            kind, span_type=SpanType.RETRIEVER if kind == "search" else SpanType.CHAIN, inputs=dict(inputs),
            experiment_id=self.experiment_id, tags={SERVED_TAG: self.model},
        )
        try:
            done = fn()
        except BaseException as exc:
            span.end(status=SpanStatusCode.ERROR, attributes={"error": type(exc).__name__})
            raise
        value = done.value
        outputs = [asdict(v) for v in value] if isinstance(value, list) else asdict(value)
        span.end(outputs=outputs, attributes={"pipeline_ms": done.seconds * 1e3})
        return done
