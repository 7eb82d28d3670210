"""The MLflow store and experiment a study logs to: checked before the first trial (a local store that is
unreadable, or emptied under a study; a server that does not answer), made or restored, described for the
MLflow UI (its note, primary metric and the study's saved view of the runs page); and values as MLflow params.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer.errors import InputError
from composer.locks import FileLock
from composer.metrics.names import mlflow_metric_name
from composer.redact import flatten, scrub, scrub_url
from composer.store import sqlite_file

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Param

    from composer.tracking.parent import ParentClaims

COMPOSITE = "composite"
"""The objective's metric: first in each trial's metrics, so MLflow's compare page (parallel coordinates)
plots it by default; also the parent run's, its best complete trial's (see ``StudyRun.lead``)."""
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


def is_local_store(tracking_uri: str) -> bool:
    return tracking_uri.startswith(("sqlite:", "sqlite+", "file:")) or "://" not in tracking_uri


def check_local_store(tracking_uri: str, claims: ParentClaims) -> None:
    """A local SQLite store that is unreadable stops the study; an empty one too once the study has
    logged to it (its parent run elected: ``claims``): its runs are gone, and MLflow would silently start
    a new history in either."""
    from composer.store import sqlite_problem

    file = sqlite_file(tracking_uri)
    if file is None:
        return
    problem = sqlite_problem(file)
    if problem is None or (problem.startswith("empty") and claims.get() is None):
        return
    raise InputError(
        f"the MLflow store {file} is {problem}. Restore it from a backup; or move it aside and log "
        "this study to another MLflow experiment (mlflow.experiment), its earlier runs then left out",
        field="mlflow.tracking_uri",
    )


def describe_experiment(client: MlflowClient, experiment_id: str, study: str, columns: Sequence[str]) -> None:
    """An experiment the MLflow UI opens on its runs (not the GenAI overview), with a description of
    how a study is laid out, the composite as its primary metric and the study's saved view of its
    runs (``runs_view``); tags a user set are kept."""
    from mlflow.exceptions import MlflowException

    found = client.get_experiment(experiment_id)
    wanted = {"mlflow.note.content": EXPERIMENT_NOTE, "mlflow.experimentKind": "custom_model_development",
              PRIMARY_METRIC_TAG: COMPOSITE, **runs_view(study, columns)}
    for key, value in wanted.items():
        if key not in found.tags:
            # another worker may set it in between (a server refuses the second: a unique key)
            with suppress(MlflowException):
                client.set_experiment_tag(experiment_id, key, value)


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


def check_server(tracking_uri: str) -> None:
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


