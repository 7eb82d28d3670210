"""A study's MLflow runs as ``RunWriter`` writes them: the study's parent run (``StudyRun``) and one nested
run per trial, with its traces (``Tracer``). A study runs it in a writer process
(``composer.tracking.writer``), off the trials' path. A trial run is written when the trial ends
(complete, pruned or failed), from its frozen trial, its ``TrialRecord`` and its artifacts file, and
written again, replacing a partial one, if the writer died half-way: each trial number has one live run.
Secrets never reach MLflow (see ``composer.redact``).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer.data.ranking import ChunkTable
from composer.evaluation.artifacts import QUESTION_TABLE, Memo
from composer.evaluation.report import report_files
from composer.files import plain_name, write_atomic
from composer.metrics.names import mlflow_metric_name
from composer.record import LOST_ATTR, TrialRecord
from composer.redact import scrub
from composer.tracking.read import (
    ROLE_TAG,
    RUN_STATUS,
    STATE_TAG,
    STUDY_TAG,
    TRIAL_TAG,
    trial_config,
    trial_run_name,
)
from composer.tracking.setup import COMPOSITE, mlflow_params
from composer.tracking.study_run import StudyRun
from composer.tracking.traces import Tracer
from composer.tracking.trial import TrialArtifacts
from composer.yamlfile import dump_yaml

if TYPE_CHECKING:
    import optuna
    from mlflow.entities import RunInfo

    from composer.evaluation.report import EvaluationReport

MLFLOW_LOGGED_ARTIFACTS = "mlflow.loggedArtifacts"
"""The run tag through which MLflow's UI shows an artifact as a table (``MlflowClient.log_table`` sets it)."""
LOST = "the process running this trial died"
"""Why a lost trial's run failed, when its frozen trial does not say (``composer.record.LOST_ATTR``)."""


class RunWriter(StudyRun):
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
        factory: bool = False,
    ) -> None:
        """See ``StudyRun``; ``expectations`` maps a question id to its gold (``expected_ids``,
        ``expected_response``), logged on its traces and in each trial's question table; ``factory``: a
        factory's study, whose settings are its own (no prompt tags are read from them)."""
        super().__init__(tracking_uri, experiment, study_name, storage=storage, artifact_root=artifact_root,
                         study_params=study_params, columns=columns)
        self.max_traces = max_traces
        self.factory = factory
        self.expectations = expectations or {}
        self.tracer = Tracer(self.experiment_id, study_name, max_traces, self.expectations)
        self._tables_logged: set[str] | None = None
        self.traces_skipped = 0
        self.traced_seconds: float | None = None
        """How long the last trial run written with its traces took: the writer's pace when it traces."""
        self.memo = Memo()
        """What a study's trial files repeat (question ids and texts, gold, chunk ids), encoded once."""

    def write_trial(
        self, trial: optuna.trial.FrozenTrial, artifacts: TrialArtifacts, *, traces: bool = True
    ) -> str:
        """One nested run, made from the trial as Optuna stored it, its record and its artifacts: params,
        metrics (every metric at every k; the pruner's steps as ``running_composite``), tags, artifacts
        (``trial_files``) and traces. A run the trial already has is kept if it was finished, replaced if a
        writer died while writing it."""
        from mlflow.entities import Metric, RunTag

        started = time.perf_counter()
        known = self._replace(trial.number)
        if known is not None:
            return known
        record = TrialRecord.of(trial)
        tags = trial_tags(trial, record, artifacts, factory=self.factory)
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
        if artifacts.report is not None:  # a conversational set's scores by turn (none for lone questions)
            by_turn = artifacts.report.breakdown_means()
            metrics += [Metric(mlflow_metric_name(k), v, now, 0) for k, v in by_turn.items()]
        steps = trial.intermediate_values
        metrics += [Metric("running_composite", steps[step], now, step) for step in sorted(steps)]
        traced = artifacts.report is not None and traces and self.max_traces != 0
        late = [] if traced or artifacts.report is None or self.max_traces == 0 else [RunTag(
            "composer.traces",
            "skipped: the MLflow writer was behind the trials; every question is in traces.jsonl",
        )]
        # The question table is a table to MLflow's UI by this tag, as log_table sets it; written with the
        # other artifacts (log_table itself lists, uploads and re-reads the run: ~0.16 s a trial).
        shown = [RunTag(MLFLOW_LOGGED_ARTIFACTS, json.dumps([{"path": QUESTION_TABLE, "type": "table"}]))]
        tags_out = late + (shown if artifacts.report is not None else [])
        params = mlflow_params(trial_config(trial))
        self.client.log_batch(run_id, metrics=metrics, params=params, tags=tags_out)
        self._log_files(run, trial_files(trial, artifacts, self.expectations, self.memo))
        if artifacts.report is not None:
            self._chunks(artifacts.report)
        if traced:
            self.tracer.write(run_id, trial, artifacts)
        self.traces_skipped += len(late)
        status = RUN_STATUS.get(trial.state.name, "FAILED")
        self.client.set_terminated(run_id, status=status, end_time=trial_end(trial))
        if traced:
            self.traced_seconds = time.perf_counter() - started
        self.logged[trial.number] = (run_id, status)
        if record is not None and trial.state.name == "COMPLETE":
            self.lead(record.composite)
        return run_id


    def write_late_traces(self, trial: optuna.trial.FrozenTrial, artifacts: TrialArtifacts, why: str) -> None:
        """The traces a trial's run went without (the writer was behind), written now into its run: the
        study's leading trials must have theirs."""
        found = self.logged.get(trial.number)
        if found is None or artifacts.report is None:
            return
        run_id = found[0]
        self.tracer.write(run_id, trial, artifacts)
        self.client.set_tag(run_id, "composer.traces", f"written after the study: {why}")
        self.client.set_terminated(run_id, status=RUN_STATUS.get(trial.state.name, "FAILED"),
                                   end_time=trial_end(trial))

    def write_lost(self, trial: optuna.trial.FrozenTrial) -> None:
        """A FAILED run for a trial whose process died, saying why it is taken for dead (its
        ``LOST_ATTR``). A run it already has is closed as FAILED: one half-written, or one written whole by
        a process that died before Optuna stored the trial's end (Optuna's state is the truth: the trial is
        retried under another number)."""
        number = trial.number
        reason = str(trial.user_attrs.get(LOST_ATTR) or LOST)
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

    def _chunks(self, report: EvaluationReport) -> None:
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


    def close(self, status: str = "FINISHED", stats: Mapping[str, float] | None = None) -> None:
        """End the parent run; ``stats`` (records written, seconds spent) join its metrics, with the MLflow
        traces written (trials, seconds) and skipped."""
        super().close(status, {
            **(stats or {}),
            "mlflow_traces_skipped": float(self.traces_skipped),
            "mlflow_traced_trials": float(self.tracer.trials),
            "mlflow_trace_seconds": self.tracer.seconds,
        })


def trial_files(
    trial: optuna.trial.FrozenTrial,
    artifacts: TrialArtifacts,
    expectations: Mapping[str, Mapping[str, Any]],
    memo: Memo | None = None,
) -> dict[str, bytes]:
    """A trial run's artifacts by name: config.yaml, its report's files (retrieved texts left out: the
    parent run holds each index's) and questions.json, those of the questions a failed trial scored
    before it failed, or a trial that failed before any has its error_rates.json; a failed trial's
    error_rates.json says its failure's reason. ``expectations``: see ``RunWriter``; ``memo``: the
    study's (see ``Memo``)."""
    files: dict[str, bytes] = {}
    record = TrialRecord.of(trial)
    if record is not None and record.config:
        files["config.yaml"] = dump_yaml(scrub(record.config)).encode()
    if artifacts.report is not None:
        files.update(report_files(artifacts.report, texts=False, expectations=expectations, memo=memo))
    reason = record.error if record is not None else None
    report = artifacts.report
    rates = artifacts.error_rates if report is None else report.error_rates() if reason else None
    if rates is not None:
        rates = {**rates, "reason": reason} if reason is not None else rates
        files["error_rates.json"] = (json.dumps(scrub(rates), ensure_ascii=False, indent=2) + "\n").encode()
    return files


def trial_tags(
    trial: optuna.trial.FrozenTrial, record: TrialRecord | None, artifacts: TrialArtifacts, *,
    factory: bool = False,
) -> dict[str, str]:
    """A trial run's Composer tags, each read from where the trial keeps it: its error, the index it
    searched, its judge, the trial it repeats, the team's prompt it answered with (a pipeline's only: a
    ``factory``'s settings are its own)."""
    tags: dict[str, str] = {}
    if record is not None and record.config and not factory:
        tags = prompt_tags(record.config)
    if record is not None and record.error is not None:
        tags["composer.error"] = record.error
    if record is not None and record.index is not None:
        tags["composer.index_key"] = record.index.key
    if record is not None and record.duplicate_of is not None:
        tags["composer.duplicate_of"] = str(record.duplicate_of)
    if artifacts.judge_model is not None:
        tags["composer.judge_model"] = artifacts.judge_model
    return tags


def prompt_tags(config: Mapping[str, Any]) -> dict[str, str]:
    """Which team's prompt a trial's config answered with: its source (a pinned registry URI, a file, or
    ``inline``), registry version and the sha256 of its text, so runs of one text are found by its hash."""
    from composer.prompts.spec import UserPrompt

    generation = config.get("generation")
    given = generation.get("prompt") if isinstance(generation, Mapping) else None
    if not isinstance(given, Mapping):
        return {}
    prompt = UserPrompt.model_validate(given)
    tags = {"composer.prompt.source": prompt.source or "inline", "composer.prompt.sha256": prompt.sha256}
    if prompt.version is not None:
        tags["composer.prompt.version"] = str(prompt.version)
    return tags


def trial_metrics(trial: optuna.trial.FrozenTrial, record: TrialRecord | None) -> dict[str, float]:
    """A trial run's metrics: its record's and its LLM usage (a failed trial's too), and a pruned trial's
    where it stopped: the step of its last intermediate value."""
    found = {} if record is None else {**record.llm_usage, **record.metrics}
    metrics = {k: float(v) for k, v in found.items() if isinstance(v, int | float)}
    if trial.state.name == "PRUNED" and trial.intermediate_values:
        metrics["pruned_at_step"] = float(max(trial.intermediate_values))
    return metrics



def trial_end(trial: optuna.trial.FrozenTrial) -> int | None:
    """When the trial ended (ms), its run's end: the run shows the trial's duration, not the writer's."""
    end = trial.datetime_complete
    return None if end is None else int(end.timestamp() * 1000)


