"""Two workers that draw one configuration at the same instant: the later waits for the earlier and answers
from its result (seen with two Ray workers in lockstep: one grid point paid for twice). Where both run it
anyway (the later read the study before the earlier's configuration was on it), they hold one slot: a grid
of N points with n_trials N is not left one point short (seen: 8 trials, 7 configurations)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ended_trials import ended_trial
from fake_llm_server import FakeLLMServer
from sample_study import write_experiment

from composer.record import TrialRecord
from composer.study._optimize import target_reached
from composer.study._workers import WORKER_ATTR, earlier_twin, wait_for_twin


def _trial(number: int, digest: str, state: str = "COMPLETE") -> Any:
    record = TrialRecord({"retrieval": {"k": number}}, digest, metrics={})
    return ended_trial(number, {}, state, record=record)[0]


def test_two_trials_of_one_configuration_hold_one_slot() -> None:
    trials = [_trial(0, "a"), _trial(1, "b"), _trial(2, "b")]
    assert not target_reached(None, 3, trials=trials)  # type: ignore[arg-type]
    assert target_reached(None, 2, trials=trials)  # type: ignore[arg-type]


def test_a_pruned_configuration_run_again_holds_a_new_slot_as_with_one_worker() -> None:
    trials = [_trial(0, "a"), _trial(1, "b", state="PRUNED"), _trial(2, "b")]
    assert target_reached(None, 3, trials=trials)  # type: ignore[arg-type]


def test_running_trials_hold_a_slot_each_until_they_end() -> None:
    trials = [_trial(0, "a"), _trial(1, "", state="RUNNING"), _trial(2, "", state="RUNNING")]
    assert target_reached(None, 3, trials=trials)  # type: ignore[arg-type]


def _study_with_twins(digest: str = "same") -> tuple[Any, Any, Any]:
    """A study with two running trials of configuration ``digest``, the first started first."""
    import optuna

    study = optuna.create_study()
    first, second = study.ask(), study.ask()
    for t in (first, second):
        TrialRecord({"retrieval": {"k": 3}}, digest).save(t)
    return study, first, second


def test_the_later_twin_waits_for_the_earlier_and_answers_from_its_result() -> None:
    import threading
    import time

    from composer.study import _optuna
    from composer.study.runner import completed_with

    study, first, second = _study_with_twins()
    at_start = _optuna.all_trials(study)
    assert earlier_twin(at_start, second.number, "same").number == first.number  # type: ignore[union-attr]
    assert earlier_twin(at_start, first.number, "same") is None  # the earlier never waits: no deadlock
    assert earlier_twin(at_start, second.number, "other") is None

    def end() -> None:
        TrialRecord({"retrieval": {"k": 3}}, "same", metrics={"composite": 0.5}).save(first)
        study.tell(first, 0.5)

    ends = threading.Timer(1.0, end)
    started = time.monotonic()
    ends.start()
    assert wait_for_twin(study, second.number, "same", at_start)
    assert time.monotonic() - started >= 1.0
    answer = completed_with(_optuna.all_trials(study), "same")
    assert answer is not None and answer.number == first.number and answer.value == 0.5


def test_a_twin_whose_worker_died_ends_the_wait_and_the_trial_runs_itself() -> None:
    from composer.study import _optuna
    from composer.study._workers import worker_id
    from composer.study.runner import completed_with

    study, first, second = _study_with_twins()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = worker_id(gone.pid)
    gone.wait()
    study._storage.set_trial_system_attr(first._trial_id, WORKER_ATTR, dead)
    assert wait_for_twin(study, second.number, "same", _optuna.all_trials(study))
    [lost] = [t for t in study.get_trials() if t.number == first.number]
    assert lost.state.name == "FAIL"
    assert completed_with(_optuna.all_trials(study), "same") is None  # nothing to answer from: it runs


def test_one_worker_alone_reads_nothing_more(monkeypatch: pytest.MonkeyPatch) -> None:
    import optuna

    from composer.study import _optuna

    study = optuna.create_study()
    only = study.ask()
    TrialRecord({"retrieval": {"k": 3}}, "same").save(only)
    at_start = _optuna.all_trials(study)
    monkeypatch.setattr(_optuna, "all_trials", lambda study: pytest.fail("read the study again"))
    assert not wait_for_twin(study, only.number, "same", at_start)


@pytest.fixture
def fake_llm_latency() -> float:
    """Replies slow enough that the two workers' trials of one configuration overlap."""
    return 1.5


@pytest.mark.slow  # two `composer optimize` workers and a scripted LLM server
def test_two_workers_handed_one_configuration_at_once_pay_for_it_once(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    """Two workers start together on a study whose queue holds one configuration twice: each takes one,
    the later waits for the earlier and repeats it; the configuration's LLM replies are paid for once."""
    import optuna

    from composer.study._storage import make_storage
    from composer.study.experiment import load_experiment

    n_questions = 6
    exp_file = write_experiment(tmp_path, n_questions=n_questions, name="twins", sampler={"name": "grid"},
                                llm={"model": "openai/slow", "api_base": fake_llm.url, "timeout": 30})
    exp = load_experiment(exp_file)
    queued = optuna.create_study(storage=make_storage(exp.storage_url), study_name="twins",
                                 direction="maximize")
    for _ in range(2):
        queued.enqueue_trial({"retrieval.mode": "bm25", "retrieval.k": 3}, skip_if_exists=False)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    workers = [subprocess.Popen([sys.executable, "-m", "composer", "optimize", str(exp_file)], cwd=tmp_path,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for _ in range(2)]
    outputs = [w.communicate(timeout=300)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], "\n".join(o[-3000:] for o in outputs)

    trials = optuna.load_study(study_name="twins", storage=exp.storage_url).get_trials()
    first, second = trials[0], trials[1]
    records = [TrialRecord.of(t) for t in (first, second)]
    assert all(r is not None for r in records) and first.state.name == second.state.name == "COMPLETE"
    assert first.system_attrs[WORKER_ATTR] != second.system_attrs[WORKER_ATTR]  # one each
    ran, repeat = (first, second) if records[1].duplicate_of == 0 else (second, first)  # type: ignore[union-attr]
    assert TrialRecord.of(repeat).duplicate_of == ran.number  # type: ignore[union-attr]
    assert repeat.value == ran.value
    assert repeat.datetime_start is not None and ran.datetime_complete is not None
    assert repeat.datetime_start < ran.datetime_complete  # it started while the other ran, and waited
    # Every request the server saw was a trial's that ran (k=3 once, then k=5): the repeat sent none
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert {t.params["retrieval.k"] for t in complete} == {3, 5}
    sent = {t.number: (TrialRecord.of(t) or pytest.fail("no record")).metrics.get("llm_requests", 0.0)
            for t in complete}
    assert sent[repeat.number] == 0 and sent[ran.number] >= n_questions  # an answer for each question
    assert fake_llm.chat_requests == sum(sent.values())
