"""MLflow records of a study: one parent run per study, one nested run per trial, per-question traces.

The parent is found by its tag ``composer.study`` so a re-run continues it. Trial runs are written when
a trial ends (complete, pruned or failed), so a crash leaves no half-written run; trials a crash cut off
are recorded as FAILED runs when the study resumes. Secrets never reach MLflow: parameters whose name
says key/token/secret/password are masked, as are credentials inside URLs; API keys are never in a config
at all (``api_key_env`` names the variable holding one, and is kept when it looks like a variable name).
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from composer.errors import InputError
from composer.evaluation.pipeline import Scored
from composer.files import write_atomic
from composer.locks import FileLock
from composer.pipeline.config import PipelineConfig
from composer.study.runner import TrialLog

if TYPE_CHECKING:
    import pandas as pd
    from mlflow import MlflowClient
    from mlflow.entities import LiveSpan, Param

logger = logging.getLogger(__name__)

STUDY_TAG = "composer.study"
ROLE_TAG = "composer.role"
TRIAL_TAG = "composer.trial"
STATE_TAG = "composer.trial_state"
RUN_STATUS = {"COMPLETE": "FINISHED", "PRUNED": "KILLED", "FAIL": "FAILED"}

_SECRET_WORDS = {"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials"}
_URL_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")
_ENV_VAR_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_METRIC_NAME = re.compile(r"[^\w\-. /]")
MASK = "***"


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"chunking": {"size": 800}}`` -> ``{"chunking.size": 800}``."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def is_secret_name(name: str) -> bool:
    """A name with a word key/token/secret/password... (an index key names a collection: not secret)."""
    lowered = name.lower()
    if lowered.endswith("index_key"):
        return False
    return any(part in _SECRET_WORDS for part in re.split(r"[._\-\s]+", lowered))


def scrub(values: Mapping[str, Any]) -> dict[str, Any]:
    """Mask text under secret-looking names (at any depth) and user:password@ in URLs.

    Only strings are masked: a secret is text, while numbers such as ``token_f1`` are scores.
    """
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, str) and value and is_secret_name(str(key)) and not _names_variable(key, value):
            out[key] = MASK
        elif isinstance(value, Mapping):
            out[key] = scrub(value)
        elif isinstance(value, str):
            out[key] = scrub_url(value)
        else:
            out[key] = value
    return out


def scrub_url(text: str) -> str:
    """``text`` with the ``user:password@`` of every URL in it masked: storage and tracking URLs may carry
    a database password, and what Composer prints often ends up in a log."""
    return _URL_USERINFO.sub(MASK + "@", text)


def _names_variable(key: Any, value: str) -> bool:
    """``api_key_env: OPENAI_API_KEY`` names where the key is; an exported config needs it to work."""
    return str(key).lower().endswith("_env") and bool(_ENV_VAR_NAME.match(value))


def mlflow_metric_name(name: str) -> str:
    """MLflow rejects "@": ``recall@10`` is logged as ``recall_at_10``."""
    return _METRIC_NAME.sub("_", name.replace("@", "_at_"))


PARENT_SETTLE_S = 2.0
"""Seconds a worker that created a parent run on a tracking server waits before checking for a twin: a
twin created later than that has a later start time, so every worker picks the same earliest one."""


def is_local_store(tracking_uri: str) -> bool:
    return tracking_uri.startswith(("sqlite:", "file:")) or "://" not in tracking_uri


class StudyTracker:
    """Writes a study's MLflow runs; ``max_traces`` caps per-question traces per trial (None = all)."""

    def __init__(
        self,
        tracking_uri: str,
        experiment: str,
        study_name: str,
        *,
        artifact_root: Path | None = None,
        max_traces: int | None = None,
        study_params: Mapping[str, Any] | None = None,
    ) -> None:
        import mlflow
        from mlflow import MlflowClient
        from mlflow.exceptions import MlflowException

        if tracking_uri.startswith("sqlite:///"):
            Path(tracking_uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.tracking_uri = tracking_uri
        self.study_name = study_name
        self.max_traces = max_traces
        # The first client to open a new local store creates its tables: two workers starting together
        # would corrupt that migration, and each would create a parent run. Locally both happen in turn.
        try:
            with _local_store_lock(tracking_uri):
                self.client: MlflowClient = MlflowClient(tracking_uri)
                self.experiment_id = self._experiment(experiment, artifact_root)
                self.parent_run_id = self._parent(study_params or {})
        except MlflowException as exc:  # an unsupported URI, a server that is down or refuses us
            reason = scrub_url(" ".join(str(exc.message).split()))[:500]
            raise InputError(f"cannot use the MLflow store {scrub_url(tracking_uri)}: {reason}",
                             field="mlflow.tracking_uri") from None
        mlflow.set_tracking_uri(tracking_uri)  # traces and the fluent run context follow this URI

    # Set-up ------------------------------------------------------------------------------------------
    def _experiment(self, name: str, artifact_root: Path | None) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            if found.lifecycle_stage == "deleted":
                self.client.restore_experiment(found.experiment_id)
            return str(found.experiment_id)
        location = None
        if artifact_root is not None:
            folder = artifact_root / re.sub(r"[^\w.\-]", "_", name)
            folder.mkdir(parents=True, exist_ok=True)
            location = folder.resolve().as_uri()
        from mlflow.exceptions import MlflowException

        try:
            return str(self.client.create_experiment(name, artifact_location=location))
        except MlflowException:  # on a server, another worker may have created it in between
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return str(found.experiment_id)

    def _parent(self, params: Mapping[str, Any]) -> str:
        """The study's parent run: the existing one (a resumed study), else a new one with study params.

        Workers sharing a tracking server may each find none and each create one: every creator then
        waits ``PARENT_SETTLE_S`` (so a parent created at the same moment elsewhere is visible), looks
        again and keeps the earliest, deleting its own if it is not that one, so all log under one.
        A local store needs no wait: its parent is found or created under a file lock.
        """
        found = self._parent_runs()
        if found:
            self.client.update_run(found[0], status="RUNNING")
            return found[0]
        run_id = str(self.client.create_run(
            self.experiment_id,
            run_name=self.study_name,
            tags={STUDY_TAG: self.study_name, ROLE_TAG: "study"},
        ).info.run_id)
        if not is_local_store(self.tracking_uri):
            time.sleep(PARENT_SETTLE_S)
        first = self._parent_runs()[0]
        if first != run_id:
            self.client.delete_run(run_id)
            return first
        self.client.log_batch(run_id, params=_params(params))
        return run_id

    def _parent_runs(self) -> list[str]:
        """Ids of the study's live parent runs, earliest first (start time, then id: one order for all)."""
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{STUDY_TAG}` = '{self.study_name}' and tags.`{ROLE_TAG}` = 'study'",
            max_results=1000,
        )
        return [str(r.info.run_id) for r in sorted(runs, key=lambda r: (r.info.start_time, r.info.run_id))]

    # Trials ------------------------------------------------------------------------------------------
    def logged_trials(self) -> dict[int, tuple[str, str]]:
        """Trial number -> (run id, run status) of the runs already under this study's parent."""
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`mlflow.parentRunId` = '{self.parent_run_id}'",
            max_results=50000,
        )
        return {int(r.data.tags[TRIAL_TAG]): (str(r.info.run_id), str(r.info.status))
                for r in runs if TRIAL_TAG in r.data.tags}

    def mark_failed(self, run_id: str, reason: str) -> None:
        """Close a run its process left open when it died while logging."""
        self.client.set_tag(run_id, STATE_TAG, "FAIL")
        self.client.set_tag(run_id, "composer.error", reason)
        self.client.set_terminated(run_id, status="FAILED")

    def log_trial(self, log: TrialLog) -> str:
        """One nested run: params, metrics (every metric at every k), tags, artifacts and traces."""
        from mlflow.entities import Metric

        run_id = self._trial_run(log.number, log.state, log.tags,
                                 start_time=int(log.started.timestamp() * 1000))
        now = int(time.time() * 1000)
        metrics = [Metric(mlflow_metric_name(k), float(v), now, 0) for k, v in log.metrics.items()
                   if isinstance(v, int | float)]
        metrics += [Metric("running_composite", v, now, step) for step, v in enumerate(log.steps)]
        self.client.log_batch(run_id, metrics=metrics, params=_params(log.config.to_dict()))
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            write_atomic(out / "config.yaml", yaml.safe_dump(scrub(log.config.to_dict()), allow_unicode=True,
                                                             sort_keys=False))
            if log.scored is not None:
                log.scored.report.save(out)
            elif log.error_rates is not None:
                write_atomic(out / "error_rates.json",
                             json.dumps(log.error_rates, ensure_ascii=False, indent=2) + "\n")
            self.client.log_artifacts(run_id, str(out))
        if log.scored is not None and self.max_traces != 0:
            self._traces(run_id, log)
        self.client.set_terminated(run_id, status=RUN_STATUS.get(log.state, "FAILED"))
        return run_id

    def log_failed_trial(self, number: int, config: Mapping[str, Any] | None, reason: str) -> None:
        """A FAILED run for a trial that never got as far as a pipeline: its sampled values were invalid,
        or its process died (failed by heartbeat). ``config`` may be nested or flat (trial params)."""
        run_id = self._trial_run(number, "FAIL", {"composer.error": reason})
        if config:
            self.client.log_batch(run_id, params=_params(config))
        self.client.set_terminated(run_id, status="FAILED")

    def _trial_run(self, number: int, state: str, tags: Mapping[str, str], **options: Any) -> str:
        """A new run for trial ``number`` nested under the study's parent; its tags scrubbed, as a trial's
        error may quote a sampled value (an endpoint with a password in it, say)."""
        run = self.client.create_run(
            self.experiment_id,
            run_name=f"trial-{number:03d}",
            tags=scrub({"mlflow.parentRunId": self.parent_run_id, STUDY_TAG: self.study_name,
                        ROLE_TAG: "trial", TRIAL_TAG: str(number), STATE_TAG: state, **tags}),
            **options,
        )
        return str(run.info.run_id)

    def _traces(self, run_id: str, log: TrialLog) -> None:
        """Per-question MLflow traces (spans retrieve, rerank, generate, judge) linked to the trial run."""
        import mlflow

        scored = log.scored
        assert scored is not None
        samples = scored.report.samples
        if self.max_traces is not None:
            samples = samples[: self.max_traces]
        with mlflow.start_run(run_id=run_id):
            for sample in samples:
                self._trace(sample.question_id, sample.question, sample.answer, sample.metrics,
                            sample.reasons, scored, log)
            mlflow.flush_trace_async_logging()

    def _trace(self, qid: str, question: str, answer: str | None, metrics: Mapping[str, float | None],
               reasons: Mapping[str, str], scored: Scored, log: TrialLog) -> None:
        import mlflow
        from mlflow.entities import SpanType

        timing = scored.timings[qid]
        hits = scored.run.get(qid, [])
        docs = [{"id": h.id, "page_content": h.text or "", "metadata": {"doc_id": h.doc_id, "score": h.score}}
                for h in hits]
        cfg = log.config
        t = timing.batch_start_ns
        root = mlflow.start_span_no_context(
            "question", span_type=SpanType.CHAIN, inputs={"question": question, "question_id": qid},
            experiment_id=self.experiment_id, start_time_ns=t,
            tags={STUDY_TAG: self.study_name, TRIAL_TAG: str(log.number), "composer.question_id": qid},
        )
        amortized = {"composer.amortized_over_questions": timing.batch_size}

        def child(name: str, kind: str, seconds: float, inputs: Any, outputs: Any,
                  attributes: Mapping[str, Any]) -> int:
            span: LiveSpan = mlflow.start_span_no_context(
                name, span_type=kind, parent_span=root, inputs=inputs, attributes=dict(attributes),
                start_time_ns=t,
            )
            end = t + int(seconds * 1e9)
            span.end(outputs=outputs, end_time_ns=end)
            return end

        reranked = cfg.rerank.method != "none"
        if cfg.query_expansion.method != "none":
            t = child("expand", SpanType.LLM, timing.expand_s, {"query": question}, None,
                      {"method": cfg.query_expansion.method, "n": cfg.query_expansion.n, **amortized})
        t = child("retrieve", SpanType.RETRIEVER, timing.retrieve_s, {"query": question},
                  {"candidates": "reranked below"} if reranked else docs,
                  {"mode": cfg.retrieval.mode, "k": cfg.retrieval.k, **amortized})
        if reranked:
            t = child("rerank", SpanType.RERANKER, timing.rerank_s, {"query": question}, docs,
                      {"method": cfg.rerank.method, "model": cfg.rerank.model or "", **amortized})
        t = child("generate", SpanType.LLM if scored.answerer.startswith("llm:") else SpanType.CHAIN,
                  timing.generate_s, {"question": question, "contexts": [h.id for h in hits]}, answer,
                  _generation_attributes(scored, qid, cfg))
        scores = {k: v for k, v in metrics.items() if v is not None}
        judged: dict[str, Any] = {**amortized, "judge": scored.judge or "deterministic scorers"}
        if reasons:
            judged["reasons"] = dict(reasons)
        t = child("judge", SpanType.EVALUATOR, timing.judge_s, {"answer": answer}, scores, judged)
        root.end(outputs={"answer": answer}, end_time_ns=t)

    # Study -------------------------------------------------------------------------------------------
    def log_study(
        self,
        summary: Mapping[str, Any],
        metrics: Mapping[str, float],
        leaderboard: pd.DataFrame,
        best_config: Mapping[str, Any] | None,
        plots: Mapping[str, str],
    ) -> None:
        """Parent-run artifacts (summary, leaderboard, best config, Optuna plots), headline metrics, and
        tags: the best trial, and why the held-out re-score failed if it did."""
        from mlflow.entities import Metric, RunTag

        now = int(time.time() * 1000)
        tags = {"composer.best_trial": str(summary.get("best_trial"))}
        held_out_error = (summary.get("held_out") or {}).get("error")
        if held_out_error is not None:
            tags["composer.held_out_error"] = str(held_out_error)[:4000]
        self.client.log_batch(
            self.parent_run_id,
            metrics=[Metric(mlflow_metric_name(k), float(v), now, 0) for k, v in metrics.items()],
            tags=[RunTag(k, v) for k, v in scrub(tags).items()],
        )
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            write_atomic(out / "study_summary.json",
                         json.dumps(scrub(summary), ensure_ascii=False, indent=2, default=str) + "\n")
            write_atomic(out / "leaderboard.csv", leaderboard.to_csv(index=False))
            if best_config is not None:
                write_atomic(out / "best_config.yaml",
                             yaml.safe_dump(scrub(best_config), allow_unicode=True, sort_keys=False))
            if plots:
                (out / "plots").mkdir()
                for name, html in plots.items():
                    write_atomic(out / "plots" / f"{name}.html", html)
            self.client.log_artifacts(self.parent_run_id, str(out))

    def close(self, status: str = "FINISHED") -> None:
        self.client.set_terminated(self.parent_run_id, status=status)


def _local_store_lock(tracking_uri: str) -> AbstractContextManager[object]:
    """A lock beside a local store (SQLite file or folder); a server orders its own writes."""
    if tracking_uri.startswith("sqlite:///") and not tracking_uri.endswith(":memory:"):
        return FileLock(tracking_uri.removeprefix("sqlite:///") + ".lock")
    if tracking_uri.startswith("sqlite:") or not is_local_store(tracking_uri):
        return nullcontext()
    folder = Path(tracking_uri.removeprefix("file://").removeprefix("file:"))
    return FileLock(folder / ".composer.lock")


def _generation_attributes(scored: Scored, qid: str, cfg: PipelineConfig) -> dict[str, Any]:
    """What answered and at what cost: the model, template and temperature, tokens, cache, failure."""
    attributes: dict[str, Any] = {"answerer": scored.answerer}
    answer = scored.answers.get(qid)
    result = answer.result if answer is not None else None
    if result is not None:
        gen = cfg.generation
        attributes.update(model=gen.model, template=gen.template, temperature=gen.temperature,
                          prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens,
                          cached=result.cached, attempts=result.attempts)
        if result.error_kind is not None:
            attributes["error"] = f"{result.error_kind}: {result.error}"
    return attributes


def _params(values: Mapping[str, Any]) -> list[Param]:
    """MLflow params of a (nested) mapping: flattened, scrubbed, each value as text MLflow accepts."""
    from mlflow.entities import Param

    return [Param(k, _param_value(v)) for k, v in scrub(flatten(values)).items()]


def _param_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text[:6000]

