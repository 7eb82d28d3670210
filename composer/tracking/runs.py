"""MLflow records of a study: one parent run per study, one nested run per trial, per-question traces.

``RunWriter`` does the MLflow work; a study runs it in a writer process (``composer.tracking.writer``),
off the trials' path. The parent is elected through the Optuna storage (``ParentClaims``), so every worker
and every re-run of a study logs under one, and a store emptied under a study is noticed. A trial run
is written when the trial ends (complete, pruned or failed) and written again, replacing a partial one, if
the writer died half-way: each trial number has one live run. Secrets never reach MLflow (see
``composer.redact``).
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext, suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer.data.ranking import ChunkTable
from composer.errors import InputError, option
from composer.evaluation.artifacts import QUESTION_TABLE, Memo
from composer.evaluation.report import report_files
from composer.files import plain_name, write_atomic
from composer.locks import FileLock
from composer.metrics.names import mlflow_metric_name
from composer.mlflow_store import prepare_mlflow_store
from composer.record import TrialRecord
from composer.redact import flatten, scrub, scrub_url
from composer.store import sqlite_file, use_wal
from composer.summary import StudySummary
from composer.tracking.parent import ParentClaims
from composer.tracking.trial import TrialReport, trial_config
from composer.yamlfile import dump_yaml

if TYPE_CHECKING:
    import optuna
    import pandas as pd
    from mlflow import MlflowClient
    from mlflow.entities import LiveSpan, Param, RunInfo


logger = logging.getLogger(__name__)

STUDY_TAG = "composer.study"
ROLE_TAG = "composer.role"
TRIAL_TAG = "composer.trial"
STATE_TAG = "composer.state"
BEST_TAG = "composer.best"
SEGMENTS_TAG = "composer.segments"
SEGMENT_ATTEMPTS = 5
RUN_STATUS = {"COMPLETE": "FINISHED", "PRUNED": "KILLED", "FAIL": "FAILED"}
"""MLflow has no "pruned" status, and its UI shows every FINISHED run alike (green): a pruned trial, stopped
early by the pruner, ends KILLED ("stopped before the end", MLflow's only status that is neither a success
nor a failure), its ``composer.state`` tag saying PRUNED. A trial's run is never KILLED otherwise (one
interrupted or lost is FAILED; only the study's parent run ends KILLED on Ctrl-C)."""
COMPOSITE = "composite"
"""The objective's metric: first in each trial's metrics, so MLflow's compare page (parallel coordinates)
plots it by default; also the parent run's, its best complete trial's (see ``RunWriter._lead``)."""
EXPERIMENT_NOTE = (
    "Composer studies: each study is a parent run (`tags.composer.role = 'study'`) with one nested run per "
    "trial. The winner is tagged `composer.best = 'true'` and named \"★ best #N\"; pruned trials are "
    "KILLED (stopped early by the pruner) with `tags.composer.state = 'PRUNED'`. Sort by `metrics.composite` "
    "(the study's run carries its best trial's composite, so the two lead, \"★ best #N\" first: MLflow puts "
    "the newer run first on a tie); each trial's Traces hold "
    "one trace per question with its metrics as assessments, and `questions.json` its per-question table. "
    "The parent run holds the study's charts (`plots/*.png`), leaderboard and best config."
)
PRIMARY_METRIC_TAG = "mlflow.experiment.primaryMetric.name"
"""The experiment tag naming the metric MLflow's run charts put first."""
VIEW_TAG = "mlflow.sharedViewState."
"""Prefix of the experiment tags holding the runs page's saved views (its "Views" menu, MLflow >= 3.15;
a runs page URL with ``viewStateShareKey=<id>`` opens one). MLflow has no per-experiment default columns:
its runs table starts on Source, Models and Dataset whatever the experiment."""
MLFLOW_LOGGED_ARTIFACTS = "mlflow.loggedArtifacts"
"""The run tag through which MLflow's UI shows an artifact as a table (``MlflowClient.log_table`` sets it)."""

def is_local_store(tracking_uri: str) -> bool:
    return tracking_uri.startswith(("sqlite:", "sqlite+", "file:")) or "://" not in tracking_uri


class RunWriter:
    """Writes a study's MLflow runs; ``max_traces`` caps per-question traces per trial (None = all)."""

    def __init__(
        self,
        tracking_uri: str,
        experiment: str,
        study_name: str,
        *,
        storage: str,
        artifact_root: Path | None = None,
        max_traces: int | None = None,
        study_params: Mapping[str, Any] | None = None,
        expectations: Mapping[str, Mapping[str, Any]] | None = None,
        columns: Sequence[str] = (),
    ) -> None:
        """``storage`` is the study's Optuna storage URL, where its parent run is elected
        (``ParentClaims``); ``expectations`` maps a question id to its gold (``expected_ids``,
        ``expected_response``), logged on its traces and in each trial's question table; ``columns``:
        the metrics the study's saved view of the runs page shows (``runs_view``)."""
        import mlflow
        from mlflow import MlflowClient
        from mlflow.exceptions import MlflowException

        if (file := sqlite_file(tracking_uri)) is not None:
            file.parent.mkdir(parents=True, exist_ok=True)
            use_wal(file)
        self.tracking_uri = tracking_uri
        self.study_name = study_name
        self.max_traces = max_traces
        self.claims = ParentClaims(storage, study_name, experiment)
        try:
            self._check_local_store()
            _check_server(tracking_uri)
            # The first client to open a new local store creates its tables: two workers starting
            # together would corrupt that migration, so locally it happens in turn.
            with local_store_lock(tracking_uri):
                prepare_mlflow_store(tracking_uri)
                self.client: MlflowClient = MlflowClient(tracking_uri)
                self.experiment_id = experiment_id(self.client, experiment, artifact_root)
                self._describe_experiment(columns)
            self.parent_run_id = self._parent(study_params or {})
            self.segment = self._next_segment()
            self.logged = self._logged_trials()
        except MlflowException as exc:  # an unsupported URI, a server that is down or refuses us
            reason = scrub_url(" ".join(str(exc.message).split()))[:500]
            raise InputError(
                f"cannot use the MLflow store {scrub_url(tracking_uri)}: {reason}",
                field="mlflow.tracking_uri",
            ) from None
        finally:
            self.claims.close()
        mlflow.set_tracking_uri(tracking_uri)  # traces and the fluent run context follow this URI
        self._tables_logged: set[str] | None = None
        self._lead_composite: float | None = None
        """The parent run's composite as this writer last read or raised it (``_lead``)."""
        self.traces_skipped = 0
        self.traced_seconds: float | None = None
        """How long the last trial run written with its traces took: the writer's pace when it traces."""
        self.trace_seconds = 0.0
        self.traced_trials = 0
        """Time spent writing MLflow traces, and for how many trials: reported with the study's run."""
        self.expectations = expectations or {}
        self.memo = Memo()
        """What a study's trial files repeat (question ids and texts, gold, chunk ids), encoded once."""

    def _check_local_store(self) -> None:
        """A local SQLite store that is unreadable stops the study; an empty one too once the study has
        logged to it (its runs are gone): MLflow would silently start a new history in either."""
        from composer.store import sqlite_problem

        file = sqlite_file(self.tracking_uri)
        if file is None:
            return
        problem = sqlite_problem(file)
        if problem is None or (problem.startswith("empty") and self.claims.get() is None):
            return
        raise InputError(
            f"the MLflow store {file} is {problem}. Restore it from a backup; or move it aside and log "
            "this study to another MLflow experiment (mlflow.experiment), its earlier runs then left out",
            field="mlflow.tracking_uri",
        )

    # Set-up ------------------------------------------------------------------------------------------
    def _describe_experiment(self, columns: Sequence[str]) -> None:
        """An experiment the MLflow UI opens on its runs (not the GenAI overview), with a description of
        how a study is laid out, the composite as its primary metric and the study's saved view of its
        runs (``runs_view``); tags a user set are kept."""
        from mlflow.exceptions import MlflowException

        found = self.client.get_experiment(self.experiment_id)
        wanted = {"mlflow.note.content": EXPERIMENT_NOTE, "mlflow.experimentKind": "custom_model_development",
                  PRIMARY_METRIC_TAG: COMPOSITE, **runs_view(self.study_name, columns)}
        for key, value in wanted.items():
            if key not in found.tags:
                # another worker may set it in between (a server refuses the second: a unique key)
                with suppress(MlflowException):
                    self.client.set_experiment_tag(self.experiment_id, key, value)

    def _next_segment(self) -> int:
        """This writer's segment of the study (0 for the first run, 1 for its first resume...): the step of
        the parent's summary metrics, so a rerun adds to their history instead of replacing them. Two
        workers starting together may both add the tag: a server on PostgreSQL refuses the second (a
        duplicate key), which then reads it again and takes the next segment."""
        from mlflow.exceptions import MlflowException

        attempt = 0
        while True:
            tags = self.client.get_run(self.parent_run_id).data.tags
            segment = int(tags.get(SEGMENTS_TAG, "0"))
            try:
                self.client.set_tag(self.parent_run_id, SEGMENTS_TAG, str(segment + 1))
                return segment
            except MlflowException:
                attempt += 1
                if attempt == SEGMENT_ATTEMPTS:
                    raise
                time.sleep(0.05 * attempt)

    def _parent(self, params: Mapping[str, Any]) -> str:
        """The study's parent run: the elected one (see ``ParentClaims``), else the one tagged with the
        study (logged before elections existed), else a new one, elected atomically among workers.

        The election outlives the MLflow store, so a store emptied or replaced under a study is an error,
        as is a store holding a study's trials while its Optuna storage has none (optuna.db lost): either
        way continuing would log trial numbers twice, or lose the earlier ones, without a word.
        """
        from mlflow.exceptions import MlflowException

        elected = self.claims.get()
        if elected is not None:
            try:
                run = self.client.get_run(elected)
            except MlflowException:
                run = None
            if run is None or run.info.lifecycle_stage != "active":
                raise InputError(
                    f"the MLflow store {scrub_url(self.tracking_uri)} no longer holds run {elected}, the "
                    f"parent of study '{self.study_name}': it was emptied, replaced or the run deleted. "
                    "Restore the store (or the run: `mlflow runs restore`), or log this study to another "
                    "MLflow experiment (mlflow.experiment)",
                    field="mlflow.tracking_uri",
                )
            self._refuse_a_fresh_study_under(elected)
            self.client.update_run(elected, status="RUNNING")
            if params and not run.data.params:  # its elector died before it logged them
                self.client.log_batch(elected, params=mlflow_params(params))
            return elected
        tagged = self._parent_runs()
        if tagged:
            self._refuse_a_fresh_study_under(tagged[0])
            return self.claims.claim(tagged[0])
        candidate = str(
            self.client.create_run(
                self.experiment_id,
                run_name=self.study_name,
                tags={STUDY_TAG: self.study_name, ROLE_TAG: "study"},
            ).info.run_id
        )
        winner = self.claims.claim(candidate)
        if winner != candidate:  # another worker's candidate was elected first
            self.client.delete_run(candidate)
            return winner
        self.client.log_batch(candidate, params=mlflow_params(params))
        return candidate

    def _refuse_a_fresh_study_under(self, parent_run_id: str) -> None:
        """A study with no trials whose parent run holds trials: its storage was lost or replaced, or
        the study deleted and created again under its name. Its trial numbers would be logged twice.
        The storage is read now, not when the study opened: another worker's trials count."""
        if self._trial_runs(parent_run_id, limit=1) and not self.claims.study_has_trials():
            raise InputError(
                f"MLflow holds trials of study '{self.study_name}' under run {parent_run_id}, but its "
                "Optuna storage has none: if the storage was lost or replaced, restore it; to start the "
                f"study again, give it another name ({option('study_name', 'NEW')})",
                field="storage",
            )

    def _parent_runs(self) -> list[str]:
        """Ids of the study's live parent runs, earliest first (start time, then id: one order for all)."""
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{STUDY_TAG}` = '{self.study_name}' and tags.`{ROLE_TAG}` = 'study'",
            max_results=1000,
        )
        return [str(r.info.run_id) for r in sorted(runs, key=lambda r: (r.info.start_time, r.info.run_id))]

    def _trial_runs(self, parent_run_id: str, limit: int = 50000) -> list[Any]:
        return list(
            self.client.search_runs(
                [self.experiment_id],
                filter_string=f"tags.`mlflow.parentRunId` = '{parent_run_id}'",
                max_results=limit,
            )
        )

    def _logged_trials(self) -> dict[int, tuple[str, str]]:
        """Trial number -> (run id, run status) of the runs already under this study's parent."""
        runs = self._trial_runs(self.parent_run_id)
        return {
            int(r.data.tags[TRIAL_TAG]): (str(r.info.run_id), str(r.info.status))
            for r in sorted(runs, key=lambda r: r.info.start_time)
            if TRIAL_TAG in r.data.tags
        }

    # Trials ------------------------------------------------------------------------------------------
    def write_trial(
        self, trial: optuna.trial.FrozenTrial, report: TrialReport, *, traces: bool = True
    ) -> str:
        """One nested run, made from the trial as Optuna stored it, its record and its report: params,
        metrics (every metric at every k; the pruner's steps as ``running_composite``), tags, artifacts
        (``trial_files``) and traces. A run the trial already has is kept if it was finished, replaced if a
        writer died while writing it."""
        from mlflow.entities import Metric, RunTag

        started = time.perf_counter()
        known = self._replace(trial.number)
        if known is not None:
            return known
        record = TrialRecord.of(trial)
        tags = trial_tags(trial, record, report)
        if record is not None and record.duplicate_of in self.logged:
            tags["composer.duplicate_of_run"] = self.logged[record.duplicate_of][0]
        start = trial.datetime_start or datetime.now(timezone.utc)
        run = self._trial_run(trial.number, trial.state.name, tags, start_time=int(start.timestamp() * 1000))
        run_id = str(run.run_id)
        now = int(time.time() * 1000)
        metrics = [
            Metric(mlflow_metric_name(k), float(v), now, 0)
            for k, v in sorted(trial_metrics(trial, record).items(), key=lambda item: item[0] != COMPOSITE)
        ]
        steps = trial.intermediate_values
        metrics += [Metric("running_composite", steps[step], now, step) for step in sorted(steps)]
        traced = report.report is not None and traces and self.max_traces != 0
        late = [] if traced or report.report is None or self.max_traces == 0 else [RunTag(
            "composer.traces",
            "skipped: the MLflow writer was behind the trials; every question is in traces.jsonl",
        )]
        # The question table is a table to MLflow's UI by this tag, as log_table sets it; written with the
        # other artifacts (log_table itself lists, uploads and re-reads the run: ~0.16 s a trial).
        shown = [RunTag(MLFLOW_LOGGED_ARTIFACTS, json.dumps([{"path": QUESTION_TABLE, "type": "table"}]))]
        tags_out = late + (shown if report.report is not None else [])
        params = mlflow_params(trial_config(trial))
        self.client.log_batch(run_id, metrics=metrics, params=params, tags=tags_out)
        self._log_files(run, trial_files(trial, report, self.expectations, self.memo))
        if report.report is not None:
            self._chunks(report.report)
        if traced:
            self._traces(run_id, trial, report)
        self.traces_skipped += len(late)
        status = RUN_STATUS.get(trial.state.name, "FAILED")
        self.client.set_terminated(run_id, status=status, end_time=trial_end(trial))
        if traced:
            self.traced_seconds = time.perf_counter() - started
        self.logged[trial.number] = (run_id, status)
        if record is not None and trial.state.name == "COMPLETE":
            self._lead(record.composite)
        return run_id

    def _lead(self, value: float | None) -> None:
        """The parent run's ``composite`` raised to a complete trial's that beats it. MLflow sorts runs
        without the metric last: ``composer ui`` opens the runs sorted by composite, and without it the
        study's run came after all its trials (with over 100 of them, not even on the first page, so they
        were listed on their own instead of nested under it). Read from the store once a writer, then kept
        here (a store read a trial cost the writer's hot path); another worker's writer may raise it past
        this one's, and the study's end writes its best in any case (``write_study``)."""
        if value is None or value != value:
            return
        if self._lead_composite is None:
            self._lead_composite = self.client.get_run(self.parent_run_id).data.metrics.get(COMPOSITE)
        if self._lead_composite is None or value > self._lead_composite:
            self.client.log_metric(self.parent_run_id, COMPOSITE, float(value), step=self.segment)
            self._lead_composite = float(value)

    def write_late_traces(self, trial: optuna.trial.FrozenTrial, report: TrialReport, why: str) -> None:
        """The traces a trial's run went without (the writer was behind), written now into its run: the
        study's leading trials must have theirs."""
        found = self.logged.get(trial.number)
        if found is None or report.report is None:
            return
        run_id = found[0]
        self._traces(run_id, trial, report)
        self.client.set_tag(run_id, "composer.traces", f"written after the study: {why}")
        self.client.set_terminated(run_id, status=RUN_STATUS.get(trial.state.name, "FAILED"),
                                   end_time=trial_end(trial))

    def write_lost(self, trial: optuna.trial.FrozenTrial, reason: str) -> None:
        """A FAILED run for a trial whose process died. A run it already has is closed as FAILED: one
        half-written, or one written whole by a process that died before Optuna stored the trial's end
        (Optuna's state is the truth: the trial is retried under another number)."""
        number = trial.number
        found = self.logged.get(number)
        if found is not None and found[1] == "FAILED":
            return
        if found is not None:
            run_id = found[0]
            self.client.set_tag(run_id, STATE_TAG, "FAIL")
            self.client.set_tag(run_id, "composer.error", reason)
        else:
            run_id = str(self._trial_run(number, "FAIL", {"composer.error": reason}).run_id)
            self.client.log_batch(run_id, params=mlflow_params(trial_config(trial)))
        self.client.set_terminated(run_id, status="FAILED")
        self.logged[number] = (run_id, "FAILED")

    def _replace(self, number: int) -> str | None:
        """The finished run of trial ``number``, if it has one; a run left half-written is deleted."""
        found = self.logged.get(number)
        if found is None:
            return None
        run_id, status = found
        if status != "RUNNING":
            return run_id
        self.client.delete_run(run_id)
        del self.logged[number]
        return None

    def _trial_run(self, number: int, state: str, tags: Mapping[str, str], **options: Any) -> RunInfo:
        """A new run for trial ``number`` nested under the study's parent; its tags scrubbed, as a trial's
        error may quote a sampled value (an endpoint with a password in it, say)."""
        run = self.client.create_run(
            self.experiment_id,
            run_name=trial_run_name(number),
            tags=scrub(
                {
                    "mlflow.parentRunId": self.parent_run_id,
                    STUDY_TAG: self.study_name,
                    ROLE_TAG: "trial",
                    TRIAL_TAG: str(number),
                    STATE_TAG: state,
                    **tags,
                }
            ),
            **options,
        )
        self.logged[number] = (str(run.info.run_id), "RUNNING")
        return run.info

    def _log_files(self, run: RunInfo, files: Mapping[str, bytes]) -> None:
        """``files`` (name -> content) as the run's artifacts: written in place, each atomically, where its
        artifacts are a local folder (what MLflow's upload would do, without writing them twice: ~10 ms a
        trial), else uploaded through MLflow."""
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
        from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository

        repository = get_artifact_repository(run.artifact_uri)
        if isinstance(repository, LocalArtifactRepository):
            folder = Path(repository.artifact_dir)
            folder.mkdir(parents=True, exist_ok=True)
            for name, text in files.items():
                write_atomic(folder / name, text)
            return
        with tempfile.TemporaryDirectory() as tmp:
            for name, text in files.items():
                write_atomic(Path(tmp) / name, text)
            self.client.log_artifacts(run.run_id, tmp)

    def _chunks(self, report: Any) -> None:
        """The texts of the index a trial searched, once per study under the parent run's ``chunks/``:
        trial traces.jsonl name chunks by id instead of repeating every text in every trial."""
        table = getattr(report.table.retrieved, "table", None)
        if not isinstance(table, ChunkTable) or not plain_name(table.key):  # the key names a file
            return
        if self._tables_logged is None:
            self._tables_logged = {
                Path(a.path).stem for a in self.client.list_artifacts(self.parent_run_id, "chunks")
            }
        if table.key in self._tables_logged:
            return
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"{table.key}.jsonl"
            with path.open("w", encoding="utf-8") as out:  # a line at a time: 10^6 chunks are ~1 GB
                for i, d, t in zip(table.ids, table.doc_ids, table.texts, strict=True):
                    out.write(json.dumps({"id": i, "doc_id": d, "text": t}, ensure_ascii=False) + "\n")
            self.client.log_artifact(self.parent_run_id, str(path), "chunks")
        self._tables_logged.add(table.key)

    def _traces(self, run_id: str, trial: optuna.trial.FrozenTrial, report: TrialReport) -> None:
        """Per-question MLflow traces (spans expand, retrieve, rerank, generate, judge) linked to the run."""
        import mlflow

        assert report.report is not None
        started = time.perf_counter()
        samples = report.report.samples
        if self.max_traces is not None:
            samples = samples[: self.max_traces]
        with mlflow.start_run(run_id=run_id):
            for sample in samples:
                self._trace(sample, trial, report)
        self.trace_seconds += time.perf_counter() - started
        self.traced_trials += 1

    def _trace(self, sample: Any, trial: optuna.trial.FrozenTrial, report: TrialReport) -> None:
        """One question's trace: its stages as spans laid end to end from the trial's start (MLflow draws
        them as a timeline), its metrics and gold as assessments."""
        import mlflow
        from mlflow.tracing.provider import safe_set_span_in_context

        started = trial.datetime_start or datetime.now(timezone.utc)
        start = int(started.timestamp() * 1e9)
        root = self._root_span(sample, trial.number, start)
        judge = report.judge or "deterministic scorers"
        t = _retrieval_spans(root, sample, trial_config(trial), start)
        t = _answer_spans(root, sample, report, judge, t)
        # Assessments logged while the trace is live travel with it, in its one write to the store: logged
        # after, each would be a write of its own (~10 ms, for every metric of every question). The traces
        # list shows the question and the answer themselves, not the root span's inputs and outputs as JSON.
        with safe_set_span_in_context(root):
            self._assess(root.trace_id, sample, judge)
            mlflow.update_current_trace(request_preview=preview(sample.question),
                                        response_preview=preview(sample.answer))
        root.end(outputs={"answer": sample.answer}, end_time_ns=t)

    def _root_span(self, sample: Any, number: int, start: int) -> LiveSpan:
        """The question's root span, tagged with its study, trial and question id: the UI's traces table
        filters by any of them."""
        import mlflow
        from mlflow.entities import SpanType

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
        )

    def _assess(self, trace_id: str, sample: Any, judge: str) -> None:
        """The question's metrics as feedback and its gold as expectations on its trace: the UI's traces
        table then sorts and filters questions by any metric."""
        import mlflow
        from mlflow.entities import AssessmentSource, AssessmentSourceType

        scorer = AssessmentSource(AssessmentSourceType.CODE, "composer")
        for name, value in sample.metrics.items():
            if value is not None:
                reason = sample.reasons.get(name)
                source = scorer if reason is None else AssessmentSource(AssessmentSourceType.LLM_JUDGE, judge)
                mlflow.log_feedback(
                    trace_id=trace_id, name=mlflow_metric_name(name), value=float(value), source=source,
                    rationale=reason,
                )
        for name, value in self.expectations.get(sample.question_id, {}).items():
            if value:
                mlflow.log_expectation(trace_id=trace_id, name=name, value=value, source=scorer)

    # Study -------------------------------------------------------------------------------------------
    def write_study(
        self, summary: StudySummary, leaderboard: pd.DataFrame, plots: Mapping[str, bytes]
    ) -> None:
        """Parent-run artifacts (summary, leaderboard, best config, the study's charts as PNG), headline
        metrics at this segment's step (a rerun adds to their history), and tags: the best trial, marked
        on its own run too, and why the held-out re-score failed if it did."""
        from mlflow.entities import Metric, RunTag

        now = int(time.time() * 1000)
        best, best_value = summary.best_trial, summary.best_value
        tags = {"composer.best_trial": str(best)}
        if best is not None and best_value is not None:
            tags["mlflow.note.content"] = (
                f"Study {self.study_name}: best trial #{best}, composite {best_value:.4f} "
                f"({summary.n_complete} complete, {summary.n_pruned} pruned, "
                f"{summary.n_failed} failed trials). Charts in plots/, ranking in leaderboard.csv."
            )
        if summary.held_out is not None and summary.held_out.error is not None:
            tags["composer.held_out_error"] = str(summary.held_out.error)[:4000]
        headline = summary.metrics()
        if best is not None and best_value is not None:
            headline[COMPOSITE] = float(best_value)  # the study's best, whichever worker found it
        self.client.log_batch(
            self.parent_run_id,
            metrics=[Metric(mlflow_metric_name(k), float(v), now, self.segment) for k, v in headline.items()],
            tags=[RunTag(k, v) for k, v in scrub(tags).items()],
        )
        if best is not None:
            self._mark_best(int(best))
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            write_atomic(
                out / "study_summary.json",
                json.dumps(scrub(summary.to_dict()), ensure_ascii=False, indent=2, default=str) + "\n",
            )
            write_atomic(out / "leaderboard.csv", leaderboard.to_csv(index=False))
            if summary.best_config is not None:
                write_atomic(out / "best_config.yaml", dump_yaml(scrub(summary.best_config)))
            if plots:
                (out / "plots").mkdir()
                for name, png in plots.items():
                    if not plain_name(name):  # the name came from a spool record: it names a file
                        raise ValueError(f"a chart named {name!r}")
                    write_atomic(out / "plots" / f"{name}.png", png)
            self.client.log_artifacts(self.parent_run_id, str(out))

    def close(self, status: str = "FINISHED", stats: Mapping[str, float] | None = None) -> None:
        """End the parent run; ``stats`` (records written, seconds spent) join its metrics, with the MLflow
        traces written (trials, seconds) and skipped."""
        from mlflow.entities import Metric

        stats = {
            **(stats or {}),
            "mlflow_traces_skipped": float(self.traces_skipped),
            "mlflow_traced_trials": float(self.traced_trials),
            "mlflow_trace_seconds": self.trace_seconds,
        }
        now = int(time.time() * 1000)
        metrics = [Metric(name, float(value), now, self.segment) for name, value in stats.items()]
        self.client.log_batch(self.parent_run_id, metrics=metrics)
        self.client.set_terminated(self.parent_run_id, status=status)

    def _mark_best(self, number: int) -> None:
        """Tag and name the winner's run ("★ best #7"); a run that was the winner before loses both."""
        from mlflow.exceptions import MlflowException

        found = self.logged.get(number)
        if found is None:
            return
        run_id = found[0]
        for run in self._trial_runs(self.parent_run_id):
            if run.data.tags.get(BEST_TAG) == "true" and run.info.run_id != run_id:
                with suppress(MlflowException):  # another worker ending too may have taken it off
                    self.client.delete_tag(run.info.run_id, BEST_TAG)
                self.client.update_run(run.info.run_id, name=trial_run_name(int(run.data.tags[TRIAL_TAG])))
        self.client.set_tag(run_id, BEST_TAG, "true")
        self.client.update_run(run_id, name=f"★ best #{number}")


def trial_files(
    trial: optuna.trial.FrozenTrial,
    report: TrialReport,
    expectations: Mapping[str, Mapping[str, Any]],
    memo: Memo | None = None,
) -> dict[str, bytes]:
    """A trial run's artifacts by name: config.yaml, the report's files (retrieved texts left out: the
    parent run holds each index's) and questions.json, those of the questions a failed trial scored
    before it failed, or a trial that failed before any has its error_rates.json; a failed trial's
    error_rates.json says its failure's reason. ``expectations``: see ``RunWriter``; ``memo``: the
    study's (see ``Memo``)."""
    files: dict[str, bytes] = {}
    record = TrialRecord.of(trial)
    if record is not None and record.config:
        files["config.yaml"] = dump_yaml(scrub(record.config)).encode()
    if report.report is not None:
        files.update(report_files(report.report, texts=False, expectations=expectations, memo=memo))
    reason = record.error if record is not None else None
    rates = report.error_rates if report.report is None else report.report.error_rates() if reason else None
    if rates is not None:
        rates = {**rates, "reason": reason} if reason is not None else rates
        files["error_rates.json"] = (json.dumps(scrub(rates), ensure_ascii=False, indent=2) + "\n").encode()
    return files


def trial_tags(
    trial: optuna.trial.FrozenTrial, record: TrialRecord | None, report: TrialReport
) -> dict[str, str]:
    """A trial run's Composer tags, each read from where the trial keeps it: its error, the index it
    searched, its judge, the trial it repeats."""
    tags: dict[str, str] = {}
    if record is not None and record.error is not None:
        tags["composer.error"] = record.error
    if record is not None and record.index is not None:
        tags["composer.index_key"] = record.index.key
    if record is not None and record.duplicate_of is not None:
        tags["composer.duplicate_of"] = str(record.duplicate_of)
    if report.judge is not None:
        tags["composer.judge_model"] = report.judge
    return tags


def trial_metrics(trial: optuna.trial.FrozenTrial, record: TrialRecord | None) -> dict[str, float]:
    """A trial run's metrics: its record's and its LLM usage (a failed trial's too), and a pruned trial's
    where it stopped: the step of its last intermediate value."""
    found = {} if record is None else {**record.llm_usage, **record.metrics}
    metrics = {k: float(v) for k, v in found.items() if isinstance(v, int | float)}
    if trial.state.name == "PRUNED" and trial.intermediate_values:
        metrics["pruned_at_step"] = float(max(trial.intermediate_values))
    return metrics


def view_id(study: str) -> str:
    """The id of a study's saved view of the runs page (a tag key: letters, digits, ``_-.`` only)."""
    return "composer-" + re.sub(r"[^\w.\-]", "_", study)


def runs_view(study: str, columns: Sequence[str]) -> dict[str, str]:
    """The experiment tag of the study's saved runs view: the composite and ``columns`` shown, sorted by
    the composite, best first; none without columns."""
    if not columns:
        return {}
    keys = [f"metrics.`{mlflow_metric_name(name)}`" for name in dict.fromkeys([COMPOSITE, *columns])]
    state = {"selectedColumns": keys, "orderByKey": keys[0], "orderByAsc": False}
    now = int(time.time() * 1000)
    envelope = {"name": f"Composer: {study}", "createdAt": now, "updatedAt": now, "state": json.dumps(state)}
    return {VIEW_TAG + view_id(study): json.dumps(envelope, ensure_ascii=False)}


def trial_end(trial: optuna.trial.FrozenTrial) -> int | None:
    """When the trial ended (ms), its run's end: the run shows the trial's duration, not the writer's."""
    end = trial.datetime_complete
    return None if end is None else int(end.timestamp() * 1000)


def trial_run_name(number: int) -> str:
    return f"trial-{number:03d}"


def study_runs(client: MlflowClient, experiment_id: str, study: str) -> tuple[str | None, dict[int, str]]:
    """The study's parent run (None if not written yet) and its trial runs by trial number (a trial's
    newest run if it has several), as the MLflow writer tags them."""
    runs = client.search_runs([experiment_id], filter_string=f"tags.`{STUDY_TAG}` = '{study}'",
                              max_results=50000)
    ordered = sorted(runs, key=lambda r: (r.info.start_time, r.info.run_id))
    parents = [str(r.info.run_id) for r in ordered if r.data.tags.get(ROLE_TAG) == "study"]
    trials = {int(r.data.tags[TRIAL_TAG]): str(r.info.run_id) for r in ordered
              if r.data.tags.get(ROLE_TAG) == "trial" and r.data.tags.get(TRIAL_TAG, "").isdigit()}
    return (parents[0] if parents else None), trials


def read_question_table(client: MlflowClient, run_id: str) -> pd.DataFrame:
    """A trial's ``questions.json`` (see ``composer.evaluation.artifacts.question_table``). Read here, not
    with ``load_table``, which searches the process's global tracking URI instead of ``client``'s store."""
    import pandas as pd

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(client.download_artifacts(run_id, QUESTION_TABLE, tmp))
        table = json.loads(path.read_text(encoding="utf-8"))
    return pd.DataFrame(table["data"], columns=table["columns"])


def experiment_id(client: MlflowClient, name: str, artifact_root: Path | None = None) -> str:
    """The id of experiment ``name``, created (its artifacts under ``artifact_root``) or restored if
    deleted; a race with another worker creating it is no error."""
    from mlflow.exceptions import MlflowException

    found = client.get_experiment_by_name(name)
    if found is not None:
        if found.lifecycle_stage == "deleted":
            client.restore_experiment(found.experiment_id)
        return str(found.experiment_id)
    location = None
    if artifact_root is not None:
        folder = artifact_root / re.sub(r"[^\w.\-]", "_", name)
        folder.mkdir(parents=True, exist_ok=True)
        location = folder.resolve().as_uri()
    try:
        return str(client.create_experiment(name, artifact_location=location))
    except MlflowException:  # on a server, another worker may have created it in between
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return str(found.experiment_id)


def _check_server(tracking_uri: str) -> None:
    """A tracking server that does not answer is named before the first trial: MLflow's own client
    retries with back-off for minutes before it gives up. Any HTTP answer (even 401) means it is up."""
    import urllib.error
    import urllib.request

    if not tracking_uri.startswith(("http://", "https://")):
        return
    try:
        urllib.request.urlopen(tracking_uri.rstrip("/") + "/health", timeout=SERVER_PROBE_S).close()
    except urllib.error.HTTPError:
        return
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise InputError(
            f"the MLflow tracking server {scrub_url(tracking_uri)} does not answer ({reason}): start it, "
            "or point mlflow.tracking_uri at one that runs (leave it out for a local store)",
            field="mlflow.tracking_uri",
        ) from None


SERVER_PROBE_S = 10.0
"""How long a tracking server may take to answer its health check."""


def local_store_lock(tracking_uri: str) -> AbstractContextManager[object]:
    """A lock beside a local store (SQLite file or folder); a server orders its own writes."""
    if (file := sqlite_file(tracking_uri)) is not None:
        return FileLock(file.with_name(file.name + ".lock"))
    if tracking_uri.startswith("sqlite:") or not is_local_store(tracking_uri):
        return nullcontext()
    folder = Path(tracking_uri.removeprefix("file://").removeprefix("file:"))
    return FileLock(folder / ".composer.lock")


def mlflow_params(values: Mapping[str, Any]) -> list[Param]:
    """MLflow params of a (nested) mapping: flattened, scrubbed, each value as text MLflow accepts."""
    from mlflow.entities import Param

    return [Param(k, _param_value(v)) for k, v in scrub(flatten(values)).items()]


def _param_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text[:6000]


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
        {"query": sample.question},
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


def _answer_spans(root: LiveSpan, sample: Any, report: TrialReport, judge: str, t: int) -> int:
    """The spans of a question's answer, from ``t`` (ns): generate (if it ran; an LLM span when an LLM
    answered) and judge, with the scores and the judge's reasons; where the last one ended."""
    from mlflow.entities import SpanType

    latency = sample.latency
    generation = dict(report.generation.get(sample.question_id, {"answerer": report.answerer}))
    if "generate" in latency:
        t = _child_span(
            root,
            "generate",
            SpanType.LLM if report.answerer.startswith("llm:") else SpanType.CHAIN,
            t,
            latency["generate"],
            {"question": sample.question, "contexts": [h.id for h in sample.retrieved]},
            sample.answer,
            generation,
        )
    scores = {k: v for k, v in sample.metrics.items() if v is not None}
    judged: dict[str, Any] = {"judge": judge}
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
