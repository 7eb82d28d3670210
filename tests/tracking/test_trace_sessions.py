"""A study's per-question traces carry their conversation's id as MLflow's own session metadata, so the
MLflow UI shows a conversation's turns together; a question that stands alone has none."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from composer.evaluation.table import SampleRecord
from composer.tracking.traces import Tracer


@pytest.mark.slow
def test_a_conversations_question_traces_share_its_session(tmp_path: Path) -> None:
    import mlflow
    from mlflow.tracing.constant import TraceMetadataKey

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    experiment = mlflow.create_experiment("trials")
    tracer = Tracer(experiment, "study", None, {})
    samples = [SampleRecord("c1#1", "من هو جمال خاشقجي؟", conversation="c1", turn=1),
               SampleRecord("c1#2", "ومتى توفي؟", conversation="c1", turn=2, follow_up=True),
               SampleRecord("alone", "ما أطول نهر في أفريقيا؟")]
    start = time.time_ns()
    for sample in samples:
        tracer._root_span(sample, 0, start).end()
    mlflow.flush_trace_async_logging()
    traces = mlflow.search_traces(locations=[experiment], return_type="list")
    key = TraceMetadataKey.TRACE_SESSION
    sessions = {t.data.spans[0].inputs["question_id"]: t.info.trace_metadata.get(key) for t in traces}
    assert sessions == {"c1#1": "c1", "c1#2": "c1", "alone": None}
