"""A trial run's MLflow traces: one per question, its stages (expand, retrieve, rerank, generate, judge) as
spans laid end to end from the trial's start, its metrics and gold as assessments. Read from the trial's
frozen trial and its artifacts file (``TrialArtifacts``), linked to its run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from composer.metrics.names import mlflow_metric_name
from composer.tracking.read import STUDY_TAG, TRIAL_TAG, trial_config
from composer.tracking.trial import TrialArtifacts

if TYPE_CHECKING:
    import optuna
    from mlflow.entities import LiveSpan


class Tracer:
    """Writes a study's per-question traces; ``max_traces`` caps them per trial (None = all) and
    ``expectations`` maps a question id to its gold (see ``RunWriter``)."""

    def __init__(
        self, experiment_id: str, study_name: str, max_traces: int | None,
        expectations: Mapping[str, Mapping[str, Any]],
    ) -> None:
        self.experiment_id = experiment_id
        self.study_name = study_name
        self.max_traces = max_traces
        self.expectations = expectations
        self.seconds = 0.0
        self.trials = 0
        """Time spent writing MLflow traces, and for how many trials: reported with the study's run."""

    def write(self, run_id: str, trial: optuna.trial.FrozenTrial, artifacts: TrialArtifacts) -> None:
        """Per-question MLflow traces (spans expand, retrieve, rerank, generate, judge) linked to the run."""
        import mlflow

        assert artifacts.report is not None
        started = time.perf_counter()
        samples = artifacts.report.samples
        if self.max_traces is not None:
            samples = samples[: self.max_traces]
        with mlflow.start_run(run_id=run_id):
            for sample in samples:
                self._trace(sample, trial, artifacts)
        self.seconds += time.perf_counter() - started
        self.trials += 1

    def _trace(self, sample: Any, trial: optuna.trial.FrozenTrial, artifacts: TrialArtifacts) -> None:
        """One question's trace: its stages as spans laid end to end from the trial's start (MLflow draws
        them as a timeline), its metrics and gold as assessments."""
        import mlflow
        from mlflow.tracing.provider import safe_set_span_in_context

        started = trial.datetime_start or datetime.now(timezone.utc)
        start = int(started.timestamp() * 1e9)
        root = self._root_span(sample, trial.number, start)
        judge_model = artifacts.judge_model or "deterministic scorers"
        t = _retrieval_spans(root, sample, trial_config(trial), start)
        t = _answer_spans(root, sample, artifacts, judge_model, t)
        # Assessments logged while the trace is live travel with it, in its one write to the store: logged
        # after, each would be a write of its own (~10 ms, for every metric of every question). The traces
        # list shows the question and the answer themselves, not the root span's inputs and outputs as JSON.
        with safe_set_span_in_context(root):
            self._assess(root.trace_id, sample, judge_model)
            mlflow.update_current_trace(request_preview=preview(sample.question),
                                        response_preview=preview(sample.answer))
        root.end(outputs={"answer": sample.answer}, end_time_ns=t)

    def _root_span(self, sample: Any, number: int, start: int) -> LiveSpan:
        """The question's root span, tagged with its study, trial and question id: the UI's traces table
        filters by any of them."""
        import mlflow
        from mlflow.entities import SpanType
        from mlflow.tracing.constant import TraceMetadataKey

        return mlflow.start_span_no_context(
            "question",
            span_type=SpanType.CHAIN,
            inputs={"question": sample.question, "question_id": sample.question_id},
            experiment_id=self.experiment_id,
            start_time_ns=start,
            tags={
                STUDY_TAG: self.study_name,
                TRIAL_TAG: str(number),
                "composer.question_id": sample.question_id,
            },
            # A conversation's turns share its id as MLflow's session: the UI shows them together.
            metadata={TraceMetadataKey.TRACE_SESSION: sample.conversation} if sample.conversation else None,
        )

    def _assess(self, trace_id: str, sample: Any, judge_model: str) -> None:
        """The question's metrics as feedback and its gold as expectations on its trace: the UI's traces
        table then sorts and filters questions by any metric."""
        import mlflow
        from mlflow.entities import AssessmentSource, AssessmentSourceType

        scorer = AssessmentSource(AssessmentSourceType.CODE, "composer")
        for name, value in sample.metrics.items():
            if value is not None:
                reason = sample.reasons.get(name)
                source = scorer if reason is None else AssessmentSource(
                    AssessmentSourceType.LLM_JUDGE, judge_model)
                mlflow.log_feedback(
                    trace_id=trace_id, name=mlflow_metric_name(name), value=float(value), source=source,
                    rationale=reason,
                )
        for name, value in self.expectations.get(sample.question_id, {}).items():
            if value:
                mlflow.log_expectation(trace_id=trace_id, name=name, value=value, source=scorer)



PREVIEW_CHARS = 60
"""Characters of a question or answer the traces table shows: MLflow lays a right-to-left text out in
its left-to-right cell and cuts what overflows on the right, where Arabic and Persian begin."""


def preview(text: str | None) -> str:
    """``text`` short enough for the traces table's cell to show whole (its full text is on the trace)."""
    text = " ".join((text or "").split())
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS - 1].rstrip() + "…"


def _retrieval_spans(root: LiveSpan, sample: Any, cfg: Mapping[str, Any], t: int) -> int:
    """The spans of a question's search, from ``t`` (ns): expand (if it ran), retrieve and rerank (if
    configured; the hits then show on it, not on retrieve); where the last one ended."""
    from mlflow.entities import SpanType

    docs = [
        {"id": h.id, "page_content": h.text or "", "metadata": {"doc_id": h.doc_id, "score": h.score}}
        for h in sample.retrieved
    ]
    retrieval, rerank = cfg.get("retrieval", {}), cfg.get("rerank", {})
    latency = sample.latency
    reranked = rerank.get("method", "none") != "none"
    if "expand" in latency:
        t = _child_span(
            root,
            "expand",
            SpanType.LLM,
            t,
            latency["expand"],
            {"query": sample.question},
            None,
            {"method": cfg.get("query_expansion", {}).get("method")},
        )
    t = _child_span(
        root,
        "retrieve",
        SpanType.RETRIEVER,
        t,
        latency.get("retrieve", 0.0),
        # The query the search ran with, where a conversation made it other than the question's words.
        {"query": sample.question}
        | ({"searched_query": sample.searched_query} if sample.searched_query else {}),
        {"candidates": "reranked below"} if reranked else docs,
        {"mode": retrieval.get("mode"), "k": retrieval.get("k")},
    )
    if reranked:
        t = _child_span(
            root,
            "rerank",
            SpanType.RERANKER,
            t,
            latency.get("rerank", 0.0),
            {"query": sample.question},
            docs,
            {"method": rerank.get("method"), "model": rerank.get("model") or ""},
        )
    return t


def _answer_spans(root: LiveSpan, sample: Any, artifacts: TrialArtifacts, judge_model: str, t: int) -> int:
    """The spans of a question's answer, from ``t`` (ns): generate (if it ran; an LLM span when an LLM
    answered) and judge, with the scores and the judge's reasons; where the last one ended."""
    from mlflow.entities import SpanType

    latency = sample.latency
    generation = dict(artifacts.generation.get(sample.question_id, {"answerer": artifacts.answerer}))
    if "generate" in latency:
        t = _child_span(
            root,
            "generate",
            SpanType.LLM if artifacts.answerer.startswith("llm:") else SpanType.CHAIN,
            t,
            latency["generate"],
            {"question": sample.question, "contexts": [h.id for h in sample.retrieved]},
            sample.answer,
            generation,
        )
    scores = {k: v for k, v in sample.metrics.items() if v is not None}
    judged: dict[str, Any] = {"judge": judge_model}
    if sample.reasons:
        judged["reasons"] = dict(sample.reasons)
    return _child_span(
        root,
        "judge",
        SpanType.EVALUATOR,
        t,
        latency.get("judge", 0.0),
        {"answer": sample.answer},
        scores,
        judged,
    )


def _child_span(
    root: LiveSpan,
    name: str,
    kind: str,
    start: int,
    seconds: float,
    inputs: Any,
    outputs: Any,
    attributes: Mapping[str, Any],
) -> int:
    """A finished stage span under ``root``, ``seconds`` long from ``start`` (ns); where it ended, the next
    stage's start."""
    import mlflow

    span: LiveSpan = mlflow.start_span_no_context(
        name,
        span_type=kind,
        parent_span=root,
        inputs=inputs,
        attributes=dict(attributes),
        start_time_ns=start,
    )
    end = start + int(seconds * 1e9)
    span.end(outputs=outputs, end_time_ns=end)
    return end
