"""The study's LLM budget (``stop: {max_llm_calls, max_cost_usd}``) against the local fake server: the
trial that crosses it stops, recorded as stopped by budget (never complete), the study ends with the best
so far and says so, and the spend passes the budget by less than one batch."""

from __future__ import annotations

import os
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from pathlib import Path

import optuna
import pytest
from fake_llm_server import FakeLLMServer
from scripted_llm import golds_of
from typer.testing import CliRunner

from composer.cli.app import app
from composer.record import TrialRecord
from composer.study.budget import spent
from composer.study.experiment import load_experiment
from composer.study.fate import fate_of

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arcd-sample"
BATCH = 3
SPACE = """
defaults:
  retrieval: {mode: bm25, k: 5}
dimensions:
  generation.template: {choices: [concise, grounded]}
  generation.temperature: {choices: [0.0, 0.7]}
"""
EXPERIMENT = """
name: budget
corpus: {corpus}
questions: questions.jsonl
search_space: space.yaml
objective: {{k: 5, metrics: {{recall: 1, answer_correctness: 1}}}}
sampler: {{name: grid, seed: null}}
pruner: none
n_trials: 4
batch_size: {batch}
mlflow: {{traces: 0}}
stop: {{max_llm_calls: {limit}}}
llm:
  model: openai/fake
  api_base: {url}
  api_key_env: COMPOSER_BUDGET_TEST_KEY
  price: {{input: 1.0, output: 2.0}}
judge:
  metrics: [answer_correctness]
"""


@pytest.fixture
def fake_llm_golds(tmp_path: Path) -> dict[str, str]:
    """The study's questions (the sample's first 12) and space, written where its experiment will be."""
    lines = (EXAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()[:12]
    (tmp_path / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "space.yaml").write_text(SPACE, encoding="utf-8")
    return golds_of(tmp_path / "questions.jsonl")


@pytest.fixture(autouse=True)
def budget_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The key the experiment names (``api_key_env``), inherited by the workers."""
    monkeypatch.setenv("COMPOSER_BUDGET_TEST_KEY", "sk-budget-test")


@pytest.mark.slow
def test_budget_stops_the_crossing_trial_within_one_batch(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    limit = 80  # the first trial makes ~50 requests (answers + judge); later ones fewer (judge cache hits)
    exp_file = tmp_path / "budget.yaml"
    exp_file.write_text(EXPERIMENT.format(corpus=EXAMPLE / "corpus.jsonl", url=fake_llm.url, batch=BATCH,
                                          limit=limit), encoding="utf-8")
    result = CliRunner().invoke(app, ["optimize", str(exp_file)])
    assert result.exit_code == 0, result.output
    assert "stopped: LLM budget spent" in " ".join(result.output.split())
    assert "LLM $" in result.output and "(study $" in result.output  # each trial line: its cost, the total
    study = optuna.load_study(study_name="budget", storage=load_experiment(exp_file).storage_url)
    trials = study.get_trials(deepcopy=False)
    fates = [fate_of(t) for t in trials]
    assert fates.count("budget") == 1 and fates[-1] == "budget" and "complete" in fates, fates
    stopped = trials[-1]
    record = TrialRecord.of(stopped)
    assert record is not None and record.composite is None and "LLM budget spent" in (record.error or "")
    first = TrialRecord.of(trials[0])  # the dearest trial: nothing of it was cached
    assert first is not None
    per_batch = first.llm_usage["llm_requests"] * BATCH / 12
    cost, requests = spent(trials)
    assert limit <= requests < limit + per_batch
    assert cost > 0


WORKERS_SPACE = """
defaults:
  retrieval: {mode: bm25}
dimensions:
  retrieval.k: {choices: [3, 4, 5, 6]}
  generation.template: {choices: [concise, grounded]}
  generation.temperature: {choices: [0.0, 0.7]}
"""
"""16 configurations, about twice what the budget pays for: the budget, not the grid, ends both workers."""


@pytest.mark.slow
def test_budget_is_shared_by_two_workers_and_passed_by_at_most_a_batch_each(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    """Two `composer optimize` processes on one PostgreSQL study: the budget is the sum of both workers'
    spend (read through the storage), both stop, and the spend passes it by less than one batch per
    worker; the server saw no more than that (plus each worker's preflight)."""
    from postgres import postgres_bin, running_postgres

    from composer.study._workers import WORKER_ATTR

    bin_dir = postgres_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries not installed: apt-get install postgresql, as .ci/run does")
    (tmp_path / "space.yaml").write_text(WORKERS_SPACE, encoding="utf-8")
    limit = 120
    exp_file = tmp_path / "budget.yaml"
    exp_file.write_text(EXPERIMENT.format(corpus=EXAMPLE / "corpus.jsonl", url=fake_llm.url, batch=BATCH,
                                          limit=limit).replace("n_trials: 4", "n_trials: 20"),
                        encoding="utf-8")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    with running_postgres(bin_dir) as pg:
        storage = pg.database("budget")
        command = [sys.executable, "-m", "composer", "optimize", str(exp_file), "--storage", storage]
        procs = [
            subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
            for _ in range(2)
        ]
        outputs = [p.communicate(timeout=600)[0] for p in procs]
        for p, out in zip(procs, outputs, strict=True):
            assert p.returncode == 0, out[-4000:]
            assert "stopped: LLM budget spent" in " ".join(out.split()), out[-4000:]
        study = optuna.load_study(study_name="budget", storage=storage)
        trials = study.get_trials(deepcopy=False)
    assert len({t.system_attrs.get(WORKER_ATTR) for t in trials}) == 2  # both workers ran trials
    fates = [fate_of(t) for t in trials]
    assert "budget" in fates and "complete" in fates, fates
    first = max((TrialRecord.of(t) for t in trials if fate_of(t) == "complete"),
                key=lambda r: r.llm_usage["llm_requests"] if r is not None else 0)
    assert first is not None
    per_batch = first.llm_usage["llm_requests"] * BATCH / 12
    _, requests = spent(trials)
    assert limit <= requests < limit + 2 * per_batch, (requests, per_batch)
    assert fake_llm.stats()["chat_requests"] == requests  # every request the workers sent is counted
