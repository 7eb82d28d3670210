"""What keeps several workers of one study from colliding, each race forced deterministically here
(tests/study/test_study_workers.py runs real workers on PostgreSQL)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from ended_trials import scripted_runner
from sqlalchemy import exc

from composer import store
from composer.record import TrialRecord
from composer.study._optimize import after_each_trial
from composer.study._sampling import StudySampler, make_sampler
from composer.study._storage import open_study
from composer.study.experiment import load_experiment
from composer.study.runner import SurplusTrial
from composer.study.space_file import load_search_space, parse_search_space
from composer.tracking.parent import ParentClaims
from composer.tracking.read import ROLE_TAG
from composer.tracking.trial_run import RunWriter

EXPERIMENT = """
name: races
corpus: c.jsonl
questions: q.jsonl
search_space: s.yaml
sampler: {name: random, seed: 3}
"""


def test_opening_a_storage_retries_only_a_schema_race(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store.time, "sleep", lambda _: None)
    calls: list[int] = []

    def collides_twice() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise exc.IntegrityError("CREATE TABLE studies", {}, Exception("duplicate key pg_type_typname"))
        if len(calls) == 2:
            raise exc.OperationalError("CREATE TABLE", {}, Exception("table studies already exists"))
        return "storage"

    assert store.despite_schema_race(collides_twice) == "storage" and len(calls) == 3

    calls.clear()

    def refused() -> str:
        calls.append(1)
        raise exc.OperationalError("connect", {}, Exception("connection refused"))

    with pytest.raises(exc.OperationalError, match="refused"):
        store.despite_schema_race(refused)
    assert len(calls) == 1  # not a race: no retry

    calls.clear()

    def always() -> str:
        calls.append(1)
        raise exc.IntegrityError("INSERT", {}, Exception("duplicate"))

    with pytest.raises(exc.IntegrityError):
        store.despite_schema_race(always)
    assert len(calls) == store.SCHEMA_ATTEMPTS


def proposals(
    sampler: optuna.samplers.BaseSampler, space: Any, n: int, *, after: int = 0
) -> list[dict[str, Any]]:
    study = optuna.create_study(sampler=sampler)
    for _ in range(after):
        study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=0.0))
    out = []
    for _ in range(n):
        trial = study.ask()
        space.sample(trial)
        out.append(trial.params)
        study.tell(trial, 0.0)
    return out


def test_each_trial_draws_from_its_own_seed(tmp_path: Path, repo_root: Path) -> None:
    """Two workers started together get different trial numbers, hence different proposals; a study
    stays reproducible from its seed."""
    (tmp_path / "e.yaml").write_text(EXPERIMENT, encoding="utf-8")
    exp = load_experiment(tmp_path / "e.yaml")
    space = load_search_space(repo_root / "search_spaces" / "arabic-offline.yaml")

    def seeded() -> StudySampler:
        return StudySampler(lambda place: make_sampler(exp, space, place), per_trial=True)

    first = proposals(seeded(), space, 4)
    assert first == proposals(seeded(), space, 4)  # reproducible
    assert len({repr(p) for p in first}) > 1
    # Trial n is drawn as make_sampler(seed + n) alone would draw it, whoever runs it.
    alone = [proposals(make_sampler(exp, space, n), space, 1)[0] for n in range(4)]
    assert first == alone
    # A second worker's trials (numbers 4..7) do not replay the first worker's (0..3).
    assert proposals(seeded(), space, 4, after=4) != first


def test_grid_workers_share_one_grid_order_and_never_repeat_a_point(tmp_path: Path) -> None:
    """Every grid trial's point is an index into the seeded grid order: two workers (and every trial)
    must read it in the same order, or trials repeat points while others are never run."""
    (tmp_path / "e.yaml").write_text(EXPERIMENT.replace("random", "grid") + "workdir: .\n", encoding="utf-8")
    exp = load_experiment(tmp_path / "e.yaml")
    space = parse_search_space({"dimensions": {"retrieval.mode": {"choices": ["bm25", "dense", "hybrid"]},
                                               "retrieval.k": {"choices": [1, 5, 10]},
                                               "chunking.size": {"choices": [400, 800]}}})
    workers = [open_study(exp, space), open_study(exp, space)]

    def objective(trial: optuna.Trial) -> float:
        space.sample(trial)
        return 0.0

    for i in range(18):
        workers[i % 2].optimize(objective, n_trials=1)
    seen = {tuple(sorted(t.params.items())) for t in workers[0].trials}
    assert len(workers[0].trials) == 18 and len(seen) == 18  # the whole grid, each point once


def test_a_trial_started_past_the_target_is_surplus(tmp_path: Path) -> None:
    """Two workers that saw one free slot at the same instant both started a trial: the later number
    must not run, so the study ends with exactly its target of trials."""
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'o.db'}", study_name="s")
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=1.0))
    other_worker = study.ask()  # running elsewhere: holds the last slot
    ran: list[int] = []
    failed: list[tuple[int, str]] = []

    class Tracker:
        def submit(self, trial: optuna.trial.FrozenTrial) -> None:
            failed.append((trial.number, (TrialRecord.of(trial) or TrialRecord({}, "")).error or ""))

        def lost(self, trials: Any) -> None:
            raise AssertionError("no trial is lost here")

    def runner(trial: optuna.Trial) -> float:
        ran.append(trial.number)
        return 0.5

    objective = scripted_runner(runner, 2)
    written = after_each_trial(tracker=Tracker())  # type: ignore[arg-type]
    study.optimize(objective, n_trials=5, catch=(SurplusTrial,), callbacks=[written])
    # It stopped this worker at once: one surplus trial, failed unscored, the runner never called.
    assert ran == [] and len(study.trials) == 3
    surplus = study.trials[2]
    record = TrialRecord.of(surplus)
    assert surplus.state == optuna.trial.TrialState.FAIL and record is not None and record.error is not None
    assert record.error.startswith("surplus")
    assert failed == [(2, record.error)]

    # Once the other worker's trial failed, its slot is free again and the next trial runs.
    study.tell(other_worker, state=optuna.trial.TrialState.FAIL)
    study.optimize(objective, n_trials=1, catch=(SurplusTrial,), callbacks=[written])
    assert ran == [3] and study.trials[3].state == optuna.trial.TrialState.COMPLETE


def test_workers_that_each_create_a_parent_run_elect_one_through_the_study_storage(tmp_path: Path) -> None:
    """On a tracking server two workers may each find no parent and each create a candidate: the
    storage's primary key elects the first insert, the loser deletes its own. No clock, no wait."""
    from mlflow.entities import ViewType

    uri, storage = f"sqlite:///{tmp_path / 'mlflow.db'}", f"sqlite:///{tmp_path / 'optuna.db'}"
    first = RunWriter(uri, "races", "s", storage=storage, study_params={"sampler": "tpe"})

    class Blind(RunWriter):
        """Finds no parent at all, as a worker whose look ran before the other's election."""

        def _parent_runs(self) -> list[str]:
            return []

    claims = ParentClaims(storage, "s", "races")
    real_get = ParentClaims.get
    looks: list[str | None] = []

    def unseen_first(self: ParentClaims) -> str | None:
        looks.append(None)
        return None if len(looks) == 1 else real_get(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ParentClaims, "get", unseen_first)
        second = Blind(uri, "races", "s", storage=storage, study_params={"sampler": "tpe"})
    assert second.parent_run_id == first.parent_run_id == claims.get()
    runs = first.client.search_runs([first.experiment_id], filter_string=f"tags.`{ROLE_TAG}` = 'study'",
                                    run_view_type=ViewType.ALL)
    assert len(runs) == 2
    by_id = {r.info.run_id: r for r in runs}
    assert by_id[first.parent_run_id].info.lifecycle_stage == "active"
    assert by_id[first.parent_run_id].data.params["sampler"] == "tpe"
    [deleted] = [r for r in runs if r.info.run_id != first.parent_run_id]
    assert deleted.info.lifecycle_stage == "deleted" and deleted.data.params == {}
    # A claim is per study and MLflow experiment.
    assert ParentClaims(storage, "other", "races").get() is None
    assert ParentClaims(storage, "s", "elsewhere").get() is None


def test_a_study_deleted_and_created_again_under_its_name_is_refused_its_old_parent(tmp_path: Path) -> None:
    """Its trial-000 must not land beside the old study's trial-000 under one parent run."""
    from composer.errors import InputError
    from composer.tracking.read import TRIAL_TAG

    uri, storage = f"sqlite:///{tmp_path / 'mlflow.db'}", f"sqlite:///{tmp_path / 'optuna.db'}"
    first = RunWriter(uri, "races", "s", storage=storage)
    first.client.create_run(first.experiment_id, tags={"mlflow.parentRunId": first.parent_run_id,
                                                       TRIAL_TAG: "0"})
    study = optuna.create_study(study_name="s", storage=storage)  # a new study: no trials yet
    with pytest.raises(InputError, match=r"MLflow holds trials of study 's'.*another name \(name='NEW'\)"
                       ) as refused:
        RunWriter(uri, "races", "s", storage=storage)
    assert refused.value.cli_message().endswith("another name (--study-name NEW)")
    # Another worker's trial, from after this worker opened the study, counts: no refusal then.
    study.ask()
    assert RunWriter(uri, "races", "s", storage=storage).parent_run_id == first.parent_run_id


def test_a_parent_elected_by_a_worker_that_died_before_logging_its_params_gets_them(tmp_path: Path) -> None:
    uri, storage = f"sqlite:///{tmp_path / 'mlflow.db'}", f"sqlite:///{tmp_path / 'optuna.db'}"
    first = RunWriter(uri, "races", "s", storage=storage)  # elected, no params (as if it died then)
    assert first.client.get_run(first.parent_run_id).data.params == {}
    second = RunWriter(uri, "races", "s", storage=storage, study_params={"sampler": "tpe"})
    assert second.parent_run_id == first.parent_run_id
    assert second.client.get_run(second.parent_run_id).data.params == {"sampler": "tpe"}


def test_an_experiment_created_in_between_is_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    existing = MlflowClient(uri).create_experiment("races")
    looks: list[str] = []
    original = MlflowClient.get_experiment_by_name

    def late(self: MlflowClient, name: str) -> Any:
        looks.append(name)
        return None if len(looks) == 1 else original(self, name)  # the other worker's create lands now

    monkeypatch.setattr(MlflowClient, "get_experiment_by_name", late)
    writer = RunWriter(uri, "races", "s", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    assert writer.experiment_id == existing and len(looks) == 2


def test_a_study_bounded_by_its_timeout_alone_runs_every_trial() -> None:
    study = optuna.create_study()
    objective = scripted_runner(lambda trial: 0.5, None)
    study.optimize(objective, n_trials=2)
    assert [t.value for t in study.trials] == [0.5, 0.5]
