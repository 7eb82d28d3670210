"""A study's MLflow parent run: the store and experiment opened and checked, the parent elected through the
Optuna storage (``ParentClaims``), so every worker and every re-run of a study logs under one, and a store
emptied under a study is noticed; then what the parent run shows: the best composite so far, the study's
summary, leaderboard and charts, the winner marked among its trial runs. Secrets never reach MLflow (see
``composer.redact``).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer.errors import InputError, option
from composer.files import plain_name, write_atomic
from composer.metrics.names import mlflow_metric_name
from composer.mlflow_store import prepare_mlflow_store
from composer.redact import scrub, scrub_url
from composer.store import sqlite_file, use_wal
from composer.summary import StudySummary
from composer.tracking.parent import ParentClaims
from composer.tracking.read import BEST_TAG, ROLE_TAG, STUDY_TAG, TRIAL_TAG, trial_run_name
from composer.tracking.setup import (
    COMPOSITE,
    check_local_store,
    check_server,
    describe_experiment,
    experiment_id,
    local_store_lock,
    mlflow_params,
)
from composer.yamlfile import dump_yaml

if TYPE_CHECKING:
    import pandas as pd
    from mlflow import MlflowClient

SEGMENTS_TAG = "composer.segments"
SEGMENT_ATTEMPTS = 5


class StudyRun:
    """A study's parent run, opened (or elected) on the store; ``logged`` holds the trial runs under it."""

    def __init__(
        self,
        tracking_uri: str,
        experiment: str,
        study_name: str,
        *,
        storage: str,
        artifact_root: Path | None = None,
        study_params: Mapping[str, Any] | None = None,
        columns: Sequence[str] = (),
    ) -> None:
        """``storage`` is the study's Optuna storage URL, where its parent run is elected
        (``ParentClaims``); ``columns``: the metrics the study's saved view of the runs page shows
        (``runs_view``)."""
        import mlflow
        from mlflow import MlflowClient
        from mlflow.exceptions import MlflowException

        if (file := sqlite_file(tracking_uri)) is not None:
            file.parent.mkdir(parents=True, exist_ok=True)
            use_wal(file)
        self.tracking_uri = tracking_uri
        self.study_name = study_name
        self.claims = ParentClaims(storage, study_name, experiment)
        try:
            check_local_store(tracking_uri, self.claims)
            check_server(tracking_uri)
            # The first client to open a new local store creates its tables: two workers starting
            # together would corrupt that migration, so locally it happens in turn.
            with local_store_lock(tracking_uri):
                prepare_mlflow_store(tracking_uri)
                self.client: MlflowClient = MlflowClient(tracking_uri)
                self.experiment_id = experiment_id(self.client, experiment, artifact_root)
                describe_experiment(self.client, self.experiment_id, study_name, columns)
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
        self._lead_composite: float | None = None
        """The parent run's composite as this writer last read or raised it (``lead``)."""

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
        if self.trial_runs(parent_run_id, limit=1) and not self.claims.study_has_trials():
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

    def trial_runs(self, parent_run_id: str, limit: int = 50000) -> list[Any]:
        return list(
            self.client.search_runs(
                [self.experiment_id],
                filter_string=f"tags.`mlflow.parentRunId` = '{parent_run_id}'",
                max_results=limit,
            )
        )

    def _logged_trials(self) -> dict[int, tuple[str, str]]:
        """Trial number -> (run id, run status) of the runs already under this study's parent."""
        runs = self.trial_runs(self.parent_run_id)
        return {
            int(r.data.tags[TRIAL_TAG]): (str(r.info.run_id), str(r.info.status))
            for r in sorted(runs, key=lambda r: r.info.start_time)
            if TRIAL_TAG in r.data.tags
        }

    def lead(self, value: float | None) -> None:
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
        """End the parent run; ``stats`` (what the writer wrote, and how long it took) join its metrics."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(name, float(value), now, self.segment) for name, value in (stats or {}).items()]
        self.client.log_batch(self.parent_run_id, metrics=metrics)
        self.client.set_terminated(self.parent_run_id, status=status)

    def _mark_best(self, number: int) -> None:
        """Tag and name the winner's run ("★ best #7"); a run that was the winner before loses both."""
        from mlflow.exceptions import MlflowException

        found = self.logged.get(number)
        if found is None:
            return
        run_id = found[0]
        for run in self.trial_runs(self.parent_run_id):
            if run.data.tags.get(BEST_TAG) == "true" and run.info.run_id != run_id:
                with suppress(MlflowException):  # another worker ending too may have taken it off
                    self.client.delete_tag(run.info.run_id, BEST_TAG)
                self.client.update_run(run.info.run_id, name=trial_run_name(int(run.data.tags[TRIAL_TAG])))
        self.client.set_tag(run_id, BEST_TAG, "true")
        self.client.update_run(run_id, name=f"★ best #{number}")


