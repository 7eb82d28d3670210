"""Reading a study's MLflow runs back: how the writer tags them, found again by those tags, and what a trial's
run holds. The CLI, calibration and the model registry read runs here, never through the writer.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer.evaluation.artifacts import QUESTION_TABLE
from composer.record import TrialRecord

if TYPE_CHECKING:
    import optuna
    import pandas as pd
    from mlflow import MlflowClient

STUDY_TAG = "composer.study"
ROLE_TAG = "composer.role"
TRIAL_TAG = "composer.trial"
STATE_TAG = "composer.state"
BEST_TAG = "composer.best"
RUN_STATUS = {"COMPLETE": "FINISHED", "PRUNED": "KILLED", "FAIL": "FAILED"}
"""MLflow has no "pruned" status, and its UI shows every FINISHED run alike (green): a pruned trial, stopped
early by the pruner, ends KILLED ("stopped before the end", MLflow's only status that is neither a success
nor a failure), its ``composer.state`` tag saying PRUNED. A trial's run is never KILLED otherwise (one
interrupted or lost is FAILED; only the study's parent run ends KILLED on Ctrl-C)."""


def trial_run_name(number: int) -> str:
    return f"trial-{number:03d}"


def trial_config(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """The trial's pipeline config (credentials masked) or, for one that never had one, its parameters."""
    record = TrialRecord.of(trial)
    return dict(record.config) if record is not None and record.config else dict(trial.params)


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
