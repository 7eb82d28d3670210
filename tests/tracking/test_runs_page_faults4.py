"""The MLflow runs page as Composer writes it: a trial's run lasts as long as the trial did, the study's
saved view shows the composite and its weighted metrics, and a trace's preview of an Arabic answer is
short enough for its cell to show its beginning."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

from ended_trials import ended_trial
from writer_logs import runs_by_trial

from composer.tracking.setup import PRIMARY_METRIC_TAG, VIEW_TAG
from composer.tracking.traces import PREVIEW_CHARS, preview
from composer.tracking.trial_run import RunWriter


def writer(tmp_path: Path, columns: tuple[str, ...] = ()) -> RunWriter:
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    return RunWriter(f"sqlite:///{tmp_path / 'mlflow.db'}", "writer", "s", storage=storage, columns=columns)


def test_a_trials_run_starts_and_ends_when_the_trial_did(tmp_path: Path) -> None:
    started = datetime.now(timezone.utc) - timedelta(minutes=5)
    trial, report = ended_trial(0, {"retrieval": {"mode": "bm25", "k": 2}}, started=started,
                                metrics={"composite": 0.5})
    trial.datetime_complete = started + timedelta(seconds=0.7)
    writer(tmp_path).write_trial(trial, report)
    run = runs_by_trial(tmp_path)[0]
    assert run.info.start_time == int(started.timestamp() * 1000)
    assert run.info.end_time - run.info.start_time == 700  # the trial's 0.7 s, not the writer's clock


def test_the_experiment_has_the_studys_view_of_its_runs(tmp_path: Path) -> None:
    from mlflow import MlflowClient

    w = writer(tmp_path, ("recall@10", "faithfulness"))
    tags = MlflowClient(w.tracking_uri).get_experiment(w.experiment_id).tags
    assert tags[PRIMARY_METRIC_TAG] == "composite"
    view = json.loads(tags[VIEW_TAG + "composer-s"])
    state = json.loads(view["state"])
    assert view["name"] == "Composer: s" and isinstance(view["createdAt"], int)
    assert state["selectedColumns"] == [
        "metrics.`composite`", "metrics.`recall_at_10`", "metrics.`faithfulness`"]
    assert state["orderByKey"] == "metrics.`composite`" and state["orderByAsc"] is False


def test_an_arabic_answers_preview_keeps_its_beginning() -> None:
    answer = "ولد جمال خاشقجي في المدينة المنورة عام 1958، ودرس إدارة الأعمال في جامعة ولاية إنديانا " * 3
    shown = preview(answer)
    assert len(shown) <= PREVIEW_CHARS and shown.startswith("ولد جمال خاشقجي") and shown.endswith("…")
    assert preview("قصير") == "قصير" and preview(None) == ""


def test_parameter_importances_are_not_drawn_from_too_few_trials() -> None:
    import optuna

    from composer.study.plots import MIN_IMPORTANCE_TRIALS, importances_note, plots

    class Exp:
        multi_objective = False

    study = optuna.create_study(direction="maximize")
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    assert set(plots(study, Exp())) == {"optimization_history"}  # type: ignore[arg-type]
    note = importances_note(study)
    assert note is not None and "1 complete trial of distinct configurations" in note
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=MIN_IMPORTANCE_TRIALS - 1)
    assert importances_note(study) is None
    assert "param_importances" in plots(study, Exp())  # type: ignore[arg-type]
