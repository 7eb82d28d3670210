"""`run_study` and `composer optimize`/`composer trials` on a small BM25 study (examples/arcd-sample, Qdrant
Edge, SQLite Optuna storage, local MLflow store): the trial queue, a failed held-out re-score, the study's
LLM totals in the parent run, and a leaderboard that stays readable when piped."""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
from rich.console import Console
from sample_study import write_experiment
from typer.testing import CliRunner

from composer.cli.app import app
from composer.data.types import QuestionSet
from composer.evaluation.scoring import BatchHook, RankingPipeline, Scored
from composer.index.bm25 import Progress
from composer.judges import FailureBudgetExceeded
from composer.llm import Usage
from composer.llm.usage import active_trackers
from composer.record import TrialRecord
from composer.study._optimize import REPEAT_ALLOWANCE
from composer.study._storage import make_storage, open_study
from composer.study.data import StudyData
from composer.study.experiment import load_experiment
from composer.study.leaderboard import PIPED_WIDTH, describe_params, report_console
from composer.study.space_file import load_search_space
from composer.study.study import run_study

DIMS = {"retrieval.mode": {"choices": ["bm25"]}, "chunking.method": {"choices": ["paragraph", "sentence"]},
        "retrieval.k": {"choices": [3, 5, 10]}}
FIELDS: dict[str, Any] = {"name": "run", "objective": {"k": 5}, "n_trials": 4, "batch_size": 20}


@pytest.fixture
def experiment(tmp_path: Path) -> Path:
    return write_experiment(tmp_path, dims=DIMS, n_questions=40, **FIELDS)


@pytest.mark.slow
def test_enqueued_trials_all_run_within_n_trials(experiment: Path) -> None:
    """Waiting (enqueued) trials are what is left to run, not slots taken: 4 enqueued of 4 all run."""
    exp = load_experiment(experiment)
    queue = [{"retrieval.mode": "bm25", "chunking.method": method, "retrieval.k": k}
             for method, k in (("paragraph", 3), ("paragraph", 10), ("sentence", 5), ("sentence", 10))]
    pre = optuna.create_study(storage=make_storage(exp.storage_url), study_name="run", direction="maximize")
    for params in queue:
        pre.enqueue_trial(params)
    result = run_study(exp, console=Console(file=io.StringIO()))
    trials = optuna.load_study(study_name="run", storage=exp.storage_url).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4
    assert [t.params for t in trials] == queue
    assert result.summary.n_complete == 4 and result.summary.llm_usage is None


def test_settings_no_trial_could_run_with_fail_before_the_study_starts(
    experiment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unset key variable is one error line, not a failed trial (and Optuna traceback) per trial."""
    monkeypatch.delenv("COMPOSER_UNSET_VAR", raising=False)
    write_experiment(experiment.parent, dims=DIMS, n_questions=40,
                     llm={"model": "openai/x", "api_key_env": "COMPOSER_UNSET_VAR"}, **FIELDS)
    result = CliRunner().invoke(app, ["optimize", str(experiment)])
    assert result.exit_code == 2
    assert result.output == "error: field 'api_key_env': environment variable COMPOSER_UNSET_VAR is not set\n"
    assert not (experiment.parent / ".composer" / "optuna.db").exists()


def test_optuna_reports_failed_trials_only_with_debug(experiment: Path) -> None:
    """The live view prints one line per failed trial; Optuna's two warnings and traceback for it pass
    only when the composer logger is at DEBUG (`composer --debug`)."""
    open_study(load_experiment(experiment), load_search_space(experiment.parent / "space.yaml"))
    failures = logging.getLogger("optuna.study._optimize")
    composer_logger = logging.getLogger("composer")
    level = composer_logger.level
    try:
        raise KeyError("bug")
    except KeyError:
        record = failures.makeRecord(failures.name, logging.WARNING, __file__, 0, "Trial 0 failed with", (),
                                     sys.exc_info())
    other = failures.makeRecord(failures.name, logging.WARNING, __file__, 0, "something else", (), None)
    try:
        composer_logger.setLevel(logging.WARNING)
        assert not failures.filter(record) and failures.filter(other)
        composer_logger.setLevel(logging.DEBUG)
        assert failures.filter(record) and record.exc_info is not None
    finally:
        composer_logger.setLevel(level)


@pytest.mark.slow
@pytest.mark.parametrize("failing", ["winner", "runner_up"])
def test_a_failed_held_out_rescore_is_reported_and_the_study_finishes(
    experiment: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """A re-score over the LLM failure budget is the summary's held-out error, not a crash (the winner's
    result kept if only the runner-up's failed); the trials' LLM spending adds up in the parent run."""
    write_experiment(experiment.parent, dims=DIMS, n_questions=40,
                     **{**FIELDS, "n_trials": 3, "split": {"held_out": 0.25, "seed": 0}})
    exp = load_experiment(experiment)
    score = StudyData.score
    rescored: list[int] = []

    def spending_or_failing(self: StudyData, pipeline: RankingPipeline, questions: QuestionSet, *,
                            batch_size: int | None = None, on_batch: BatchHook | None = None,
                            on_stage: Progress | None = None,
                            on_failure: Callable[[Scored], None] | None = None) -> Scored:
        if on_batch is None:  # a held-out re-score: the winner's, then the runner-up's
            rescored.append(1)
            if len(rescored) == ("winner", "runner_up").index(failing) + 1:
                raise FailureBudgetExceeded(4, 10, 0.1, Usage())
            return score(self, pipeline, questions, batch_size=batch_size)
        for usage in active_trackers():  # one (pretend) LLM call per trial
            usage.record_call(cached=False, failed=None)
            usage.record_request(100, 20, 0.5)
        return score(self, pipeline, questions, batch_size=batch_size, on_batch=on_batch, on_stage=on_stage,
                     on_failure=on_failure)

    monkeypatch.setattr(StudyData, "score", spending_or_failing)
    result = CliRunner().invoke(app, ["optimize", str(experiment)])
    assert result.exit_code == 0, result.output
    assert "held-out (10 questions): re-scoring trial #" in result.output
    assert "FailureBudgetExceeded: 4 of 10 samples failed" in result.output

    study = optuna.load_study(study_name="run", storage=exp.storage_url)
    held = study.user_attrs["held_out"]
    scored = {"winner"} if failing == "runner_up" else set()
    assert set(held) == {"n_questions", "error", *scored} and "FailureBudgetExceeded" in held["error"]
    assert ("held-out (10 questions): winner #" in result.output) == (failing == "runner_up")
    ran = [t for t in study.trials if (r := TrialRecord.of(t)) and r.duplicate_of is None]  # repeats: no call
    assert ran and (f"LLM: {len(ran)} requests sent (trial {len(ran)}), {len(ran)} calls (0 cached), "
                    f"{120 * len(ran)} tokens") in result.output

    from mlflow import MlflowClient

    client = MlflowClient(exp.tracking_uri)
    mlflow_experiment = client.get_experiment_by_name("run")
    assert mlflow_experiment is not None
    [parent] = client.search_runs([mlflow_experiment.experiment_id],
                                  filter_string="tags.`composer.role` = 'study'")
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["composer.held_out_error"] == held["error"]
    assert parent.data.metrics["llm_calls"] == len(ran)
    assert parent.data.metrics["llm_total_tokens"] == 120 * len(ran)
    assert parent.data.metrics["llm_cost_usd"] == pytest.approx(0.5 * len(ran))


def test_a_piped_leaderboard_keeps_one_line_per_trial(tmp_path: Path) -> None:
    """Piped (`make demo | tee`), Rich would wrap at 80 columns and split every trial over lines."""
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(storage=storage, study_name="wide", direction="maximize")
    params: dict[str, Any] = {
        "retrieval.mode": "hybrid", "chunking.method": "fixed_chars", "chunking.size": 800,
        "chunking.overlap": 100, "retrieval.fusion": "dbsf", "retrieval.k": 10, "rerank.method": "mmr",
    }
    distributions: dict[str, optuna.distributions.BaseDistribution] = {
        k: optuna.distributions.CategoricalDistribution([v]) for k, v in params.items()}
    for number in range(3):
        metrics = {"composite": 0.5 + number / 10, "recall@10": 0.75, "ndcg@10": 0.5, "token_f1": 0.25,
                   "latency_ms": 12.5, "context_tokens": 640.0}
        study.add_trial(optuna.trial.create_trial(
            params=params, distributions=distributions, value=0.5 + number / 10,
            user_attrs={"composer": TrialRecord({}, f"h{number}", metrics=metrics).to_dict()},
        ))
    result = CliRunner().invoke(app, ["trials", "wide", "--storage", storage])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.lstrip().startswith("#")]
    assert len(rows) == 3 and all(describe_params(params) in row for row in rows)


def test_the_report_console_is_wide_only_when_piped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    assert report_console().width == PIPED_WIDTH  # pytest captures stdout: not a terminal
    monkeypatch.setenv("COLUMNS", "120")
    assert report_console().width == 120  # the user's own choice wins
    monkeypatch.delenv("COLUMNS")
    monkeypatch.setenv("FORCE_COLOR", "1")  # Rich then takes the output for a terminal: its own width
    console = report_console()
    assert console.is_terminal and console.width != PIPED_WIDTH


@pytest.mark.slow
def test_a_space_smaller_than_n_trials_ends_within_the_repeat_allowance(experiment: Path) -> None:
    """Two configurations and n_trials 4: both are scored, TPE's repeats are answered from them, and the
    study stops at twice n_trials trials instead of proposing forever."""
    write_experiment(experiment.parent, dims={"retrieval.mode": {"choices": ["bm25"]},
                                              "retrieval.k": {"choices": [5, 10]}},
                     n_questions=40, search_space="tiny-space.yaml", **FIELDS)
    result = CliRunner().invoke(app, ["optimize", str(experiment)])
    assert result.exit_code == 0, result.output
    study = optuna.load_study(study_name=load_experiment(experiment).name,
                              storage=load_experiment(experiment).storage_url)
    finished = [t for t in study.trials if t.state.name in ("COMPLETE", "PRUNED")]
    distinct = [t for t in finished if (r := TrialRecord.of(t)) and r.duplicate_of is None]
    assert len({t.params["retrieval.k"] for t in distinct}) == len(distinct) == 2
    assert len(finished) == REPEAT_ALLOWANCE * 4
    assert all(t.value == next(d.value for d in distinct if d.params == t.params) for t in finished)


@pytest.mark.parametrize(
    ("low", "high", "verdict"),
    [(0.001, 0.02, "yes"), (-0.01, 0.02, "not significantly"), (-0.0116, -0.0002, "no, the runner-up is")],
)
def test_the_held_out_verdict_says_when_the_runner_up_wins(low: float, high: float, verdict: str) -> None:
    from composer.summary import Difference

    difference = Difference((low + high) / 2, (low, high), 10, low > 0, high < 0)
    assert difference.verdict == verdict
