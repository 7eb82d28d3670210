"""MLflow traces of production requests (``composer serve --trace EXPERIMENT``): one trace per request,
its question and answer (or hits) as inputs and outputs, the pipeline's time and the served model as
attributes, tagged ``composer.served`` so the UI's traces table filters them from a study's; a chat's
traces share its conversation id as their MLflow session."""

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

    def traced(self, kind: str, inputs: Mapping[str, Any], fn: Callable[[], Timed],
               session: str | None = None) -> Timed:
        """``fn()`` inside a root span named ``kind``; a failure is recorded on the span, then raised."""
        span = self.start(kind, inputs, session)
        try:
            done = fn()
        except BaseException as exc:
            self.failed(span, exc)
            raise
        self.finish(span, done)
        return done

    def start(self, kind: str, inputs: Mapping[str, Any], session: str | None = None) -> Any:
        """A request's root span, open; ``session`` (the conversation id) is the trace's MLflow session,
        so the UI shows a conversation's turns together."""
        import mlflow
        from mlflow.entities import SpanType
        from mlflow.tracing.constant import TraceMetadataKey

        return mlflow.start_span_no_context(
            kind, span_type=SpanType.RETRIEVER if kind == "search" else SpanType.CHAIN, inputs=dict(inputs),
            experiment_id=self.experiment_id, tags={SERVED_TAG: self.model},
            metadata=None if session is None else {TraceMetadataKey.TRACE_SESSION: session},
        )

    def finish(self, span: Any, done: Timed) -> None:
        """End ``span`` with the request's outcome and the pipeline's time."""
        value = done.value
        outputs = [asdict(v) for v in value] if isinstance(value, list) else asdict(value)
        span.end(outputs=outputs, attributes={"pipeline_ms": done.seconds * 1e3})

    @staticmethod
    def failed(span: Any, exc: BaseException) -> None:
        from mlflow.entities import SpanStatusCode

        span.end(status=SpanStatusCode.ERROR, attributes={"error": type(exc).__name__})
