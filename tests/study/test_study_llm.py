"""A study with an LLM generator and judge end to end, through litellm against the local fake server:
tokens, cost and error rates in MLflow (checked through MlflowClient), injected faults survived without
losing a trial, a trial over its failure budget FAILED with the reason while the next one runs, a rerun
served from the LLM cache, and the API key in no param, tag, artifact, trace or log line."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import pytest
from fake_llm_server import ChatRequest, FakeLLMServer, Reply, hang, malformed, rate_limited, server_error
from sample_study import SAMPLE, write_experiment
from scripted_llm import ScriptedRAG, golds_of, kind_of, template_of
from typer.testing import CliRunner

from composer.cli.app import app
from composer.record import TrialRecord
from composer.study.experiment import ExperimentConfig, load_experiment

N_QUESTIONS = 12
KEY_ENV = "COMPOSER_STUDY_TEST_KEY"
SECRET = "sk-composer-study-0a1b2c3d4e5f6789"
# A grid of four configurations: every one runs exactly once, in the grid's declared order.
DIMS = {"generation.template": {"choices": ["grounded", "concise"]},
        "query_expansion.method": {"choices": ["none", "multi_query"]}}
DEFAULTS = {"retrieval": {"mode": "bm25", "k": 5}, "generation": {"temperature": 0.7}}
# Two templates at two temperatures: the concise ones break, the grounded ones after them run.
BUDGET_DIMS = {"generation.template": {"choices": ["concise", "grounded"]},
               "generation.temperature": {"choices": [0.0, 0.7]}}
OBJECTIVE = {"k": 5,
             "metrics": {"recall": 1, "answer_correctness": 1, "faithfulness": 1, "llm_judge_rating": 1}}


@dataclass
class Study:
    exp: ExperimentConfig
    exp_file: Path
    study: optuna.Study
    output: str
    seconds: float
    requests: int


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("llm-study")


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[FakeLLMServer]:
    golds = golds_of(SAMPLE / "questions.jsonl")
    with FakeLLMServer(ScriptedRAG(golds)) as srv:
        yield srv


@pytest.fixture(scope="module")
def secret_env() -> Iterator[None]:
    os.environ[KEY_ENV] = SECRET
    yield
    del os.environ[KEY_ENV]


def run_study(root: Path, server: FakeLLMServer, name: str, *extra: str, budget: bool = False) -> Study:
    """``name``'s study (the four-point grid, or the budget grid in a work dir of its own)."""
    llm = {"model": "openai/fake", "api_base": server.url, "api_key_env": KEY_ENV, "timeout": 1.0,
           "max_retries": 3, "backoff_base": 0.01, "backoff_max": 0.05,
           "price": {"input": 1.0, "output": 2.0}}
    exp_file = write_experiment(
        root, dims=BUDGET_DIMS if budget else DIMS, defaults=DEFAULTS, n_questions=N_QUESTIONS,
        file=f"{name}.yaml", name=name, search_space="budget-space.yaml" if budget else "space.yaml",
        objective=OBJECTIVE, sampler={"name": "grid", "seed": None}, n_trials=4, batch_size=6,
        mlflow={"traces": 3}, workdir=".composer-budget" if budget else ".composer", llm=llm,
        judge={"metrics": ["answer_correctness", "faithfulness"], "max_failure_share": 0.25})
    exp = load_experiment(exp_file)
    study_name = extra[extra.index("--study-name") + 1] if "--study-name" in extra else name
    started = time.monotonic()
    result = CliRunner().invoke(app, ["optimize", str(exp_file), *extra])
    seconds = time.monotonic() - started
    assert result.exit_code == 0, result.output
    study = optuna.load_study(study_name=study_name, storage=exp.storage_url)
    return Study(exp, exp_file, study, result.output, seconds, server.chat_requests)


# Every test but the shipped experiment's runs or reads a whole LLM study (~1 min on 2 cores): slow tier.
@pytest.fixture(scope="module")
def faulty(root: Path, server: FakeLLMServer, secret_env: None) -> Iterator[tuple[Study, str]]:
    """The study, with a rate limit, two server errors, a timeout and a malformed body on its way."""
    server.enqueue(rate_limited(0.05), server_error(500), hang(1.6), malformed(), server_error(502))
    logs = _Capture()
    root_logger = logging.getLogger()
    level = root_logger.level
    root_logger.addHandler(logs)
    root_logger.setLevel(logging.INFO)  # every library's INFO lines too (litellm, MLflow, Optuna)
    try:
        study = run_study(root, server, "llm-e2e")
    finally:
        root_logger.removeHandler(logs)
        root_logger.setLevel(level)
    yield study, logs.text()


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def text(self) -> str:
        return "\n".join(self.lines)


def mlflow_runs(study: Study) -> tuple[Any, dict[int, Any], Any]:
    from mlflow import MlflowClient

    client = MlflowClient(study.exp.tracking_uri)
    experiment = client.get_experiment_by_name(study.exp.mlflow_experiment)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id],
                              filter_string=f"tags.`composer.study` = '{study.study.study_name}'")
    trials = {int(r.data.tags["composer.trial"]): r for r in runs if r.data.tags["composer.role"] == "trial"}
    parent = next(r for r in runs if r.data.tags["composer.role"] == "study")
    return client, trials, parent


def run_traces(client: Any, run: Any) -> list[Any]:
    return list(client.search_traces(locations=[run.info.experiment_id], run_id=run.info.run_id))


@pytest.mark.slow
def test_every_trial_completes_despite_the_faults(faulty: tuple[Study, str], server: FakeLLMServer) -> None:
    study, _ = faulty
    states = [t.state.name for t in study.study.trials]
    assert states == ["COMPLETE"] * 4, [TrialRecord.of(t) for t in study.study.trials]
    assert {r for r in server.statuses} >= {200, 429, 500, 502}
    for t in study.study.trials:
        record = TrialRecord.of(t)
        assert record is not None
        metrics = record.metrics
        assert metrics["faithfulness"] == 1.0 and metrics["llm_judge_rating"] == pytest.approx(0.75)
        assert metrics["answer_correctness"] > 0.75 and metrics["llm_judge_rating_5"] == pytest.approx(4.0)
    # The LLM metrics, not their deterministic stand-ins, made the objective: no warning about them.
    assert "stand-in" not in study.output
    weights = study.study.user_attrs["objective_weights"]
    assert set(weights) == {"recall@5", "answer_correctness", "faithfulness", "llm_judge_rating"}
    print(f"\nLLM study: 4 trials x {N_QUESTIONS} questions in {study.seconds:.1f} s, "
          f"{study.requests} chat requests")


@pytest.mark.slow
def test_mlflow_holds_tokens_cost_and_error_rates(faulty: tuple[Study, str]) -> None:
    study, _ = faulty
    client, trials, _ = mlflow_runs(study)
    assert sorted(trials) == [0, 1, 2, 3]
    totals: dict[str, float] = {}
    for run in trials.values():
        m = run.data.metrics
        # Tokens and cost count paid requests; a trial whose every call an earlier one made (the same
        # contexts, the same answers) is served from the cache and costs nothing.
        assert (m["llm_prompt_tokens"] > 0 and m["llm_completion_tokens"] > 0) or (
            m["llm_requests"] == 0 and m["llm_cached_calls"] == m["llm_calls"])
        for key in ("llm_prompt_tokens", "llm_completion_tokens", "llm_cost_usd", "llm_cached_calls"):
            totals[key] = totals.get(key, 0) + m[key]
        priced = (m["llm_prompt_tokens"] * 1.0 + m["llm_completion_tokens"] * 2.0) / 1e6  # the price map
        assert m["llm_cost_usd"] == pytest.approx(priced)
        assert m["llm_calls"] >= N_QUESTIONS * 3 and m["llm_judge_rating_5"] == pytest.approx(4.0)
        assert run.data.tags["composer.judge_model"] == "openai/fake"
        for key in ("generation.model", "generation.template", "query_expansion.method"):
            assert key in run.data.params
        for kind in ("rate_limit", "server_error", "timeout", "bad_response"):
            totals[kind] = totals.get(kind, 0) + m.get(f"llm_failed_requests_{kind}", 0)
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"summary.json", "samples.csv", "traces.jsonl", "error_rates.json", "config.yaml"} <= artifacts
        rates = json.loads(Path(client.download_artifacts(run.info.run_id, "error_rates.json")).read_text())
        assert rates["llm"]["calls"] == m["llm_calls"] and rates["llm"]["failed_samples"] == 0
        assert set(rates["llm"]["kinds"]) == {"rate_limit", "server_error", "timeout", "connection",
                                              "bad_response", "oversized", "other"}
        summary = json.loads(Path(client.download_artifacts(run.info.run_id, "summary.json")).read_text())
        assert summary["llm"]["llm_judge_rating"] == "4.0/5" and summary["llm"]["judge"] == "openai/fake"
    faults = {k: totals[k] for k in ("rate_limit", "server_error", "timeout", "bad_response")}
    assert faults == {"rate_limit": 1, "server_error": 2, "timeout": 1, "bad_response": 1}
    assert totals["llm_prompt_tokens"] > 0 and totals["llm_cost_usd"] > 0 and totals["llm_cached_calls"] > 0


@pytest.mark.slow
def test_traces_show_generate_and_judge_spans(faulty: tuple[Study, str]) -> None:
    study, _ = faulty
    client, trials, _ = mlflow_runs(study)
    expanded = next(t.number for t in study.study.trials if t.params == {
        "generation.template": "concise", "query_expansion.method": "multi_query"})
    traces = run_traces(client, trials[expanded])
    assert len(traces) == 3
    spans = {s.name: s for s in traces[0].data.spans}
    assert {"question", "expand", "retrieve", "generate", "judge"} <= set(spans)
    generate = spans["generate"].attributes
    assert generate["model"] == "openai/fake" and generate["template"] == "concise"
    assert generate["temperature"] == 0.7 and generate["prompt_tokens"] > 0
    judge = spans["judge"]
    assert judge.attributes["judge"] == "openai/fake" and "faithfulness" in judge.attributes["reasons"]
    assert judge.outputs["faithfulness"] == 1.0


@pytest.mark.slow
def test_the_key_is_in_no_param_tag_artifact_trace_or_log(faulty: tuple[Study, str], server: FakeLLMServer
                                                           ) -> None:
    study, logs = faulty
    assert any(r.headers.get("authorization") == f"Bearer {SECRET}" for r in server.received)  # it was used
    client, trials, parent = mlflow_runs(study)
    seen = [study.output, logs]
    for run in [parent, *trials.values()]:
        seen += [json.dumps(run.data.params), json.dumps(run.data.tags)]
        stack = [a.path for a in client.list_artifacts(run.info.run_id)]
        while stack:
            path = stack.pop()
            local = Path(client.download_artifacts(run.info.run_id, path))
            if local.is_dir():
                stack += [a.path for a in client.list_artifacts(run.info.run_id, path)]
            else:
                seen.append(local.read_text(encoding="utf-8", errors="replace"))
        for trace in run_traces(client, run):
            seen.append(trace.to_json())
    assert trials[0].data.params["generation.api_key_env"] == KEY_ENV  # the name, never the value
    assert all(SECRET not in text for text in seen)
    assert len(seen) > 20 and len(logs) > 0


@pytest.mark.slow
def test_a_rerun_of_the_same_configurations_is_served_from_the_llm_cache(
    faulty: tuple[Study, str], root: Path, server: FakeLLMServer
) -> None:
    before = server.chat_requests
    rerun = run_study(root, server, "llm-e2e", "--study-name", "llm-e2e-rerun")
    assert server.chat_requests == before  # not one request reached the server
    assert [t.state.name for t in rerun.study.trials] == ["COMPLETE"] * 4
    _, trials, _ = mlflow_runs(rerun)
    for run in trials.values():
        m = run.data.metrics
        assert m["llm_cached_calls"] == m["llm_calls"] > 0 and m["llm_cost_usd"] == 0.0
    first = {json.dumps(t.params, sort_keys=True): t.values for t in faulty[0].study.trials}
    again = {json.dumps(t.params, sort_keys=True): t.values for t in rerun.study.trials}
    assert again == first  # the same answers, the same scores


@pytest.mark.slow
def test_a_trial_over_its_failure_budget_fails_with_the_reason_and_the_next_one_runs(
    root: Path, server: FakeLLMServer, secret_env: None
) -> None:
    scripted = server.route

    def concise_breaks(req: ChatRequest) -> Reply | str:
        if kind_of(req) == "generate" and template_of(req) == "concise" and "NO" not in req.prompt:
            return server_error(500)
        return scripted(req)

    server.route = concise_breaks
    try:
        # A work dir of its own: no reply another study cached may rescue a broken answer.
        broken = run_study(root, server, "llm-budget", budget=True)
    finally:
        server.route = scripted
    trials = broken.study.trials
    states = {t.params["generation.template"]: t.state.name for t in trials}
    assert states == {"concise": "FAIL", "grounded": "COMPLETE"} and len(trials) == 4
    failed = next(t for t in trials if t.state.name == "FAIL")
    completed = next(t for t in trials if t.state.name == "COMPLETE" and t.number > failed.number)
    record = TrialRecord.of(failed)
    assert record is not None and record.error is not None
    reason = record.error
    assert reason.startswith("FailureBudgetExceeded: ") and "above the allowed share of 25%" in reason
    assert "server_error" in reason
    _, runs, _ = mlflow_runs(broken)
    run = runs[failed.number]
    assert run.info.status == "FAILED" and run.data.tags["composer.state"] == "FAIL"
    assert "samples failed, above the allowed share" in run.data.tags["composer.error"]
    assert run.data.metrics["llm_failed_calls"] >= 4  # 12 questions, 25%: the 4th failure ends it
    assert runs[completed.number].info.status == "FINISHED"


def test_the_shipped_llm_experiment_and_space_load_and_sample_valid_configs() -> None:
    from composer.data.types import Corpus, QuestionSet
    from composer.study.data import StudyData
    from composer.study.space_file import load_search_space

    repo = Path(__file__).resolve().parents[2]
    exp = load_experiment(repo / "experiments" / "arabic-llm.yaml")
    assert exp.llm is not None and exp.llm.api_base and exp.judge is not None
    assert exp.judge.llm_config(exp.llm).model == exp.judge.model  # type: ignore[union-attr]
    data = StudyData(corpus=Corpus([], "none"), questions=QuestionSet([], "none"),
                     space=load_search_space(exp.search_space), objective_config=exp.objective,
                     workdir=repo / ".composer", llm=exp.llm, judge=exp.judge)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    models, expansions = set(), set()
    for _ in range(40):
        trial = study.ask()
        config = data.space.sample(trial)  # every sampled combination is a valid pipeline
        assert config.generation.api_base == exp.llm.api_base
        models.add(config.generation.model)
        expansions.add(config.query_expansion.method)
        study.tell(trial, 0.0)
    assert len(models) == 3 and expansions == {"none", "multi_query", "hyde"}


@pytest.mark.slow
def test_the_exported_winner_carries_its_llm_and_eval_reproduces_it_from_the_cache(
    faulty: tuple[Study, str], server: FakeLLMServer, tmp_path: Path
) -> None:
    import yaml

    study, _ = faulty
    out = tmp_path / "best.yaml"
    result = CliRunner().invoke(app, ["export", "-e", str(study.exp_file), "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load(out.read_text(encoding="utf-8"))
    generation = doc["pipeline"]["generation"]
    assert generation["model"] == "openai/fake" and generation["api_base"] == server.url
    assert generation["api_key_env"] == KEY_ENV and SECRET not in out.read_text(encoding="utf-8")

    before = server.chat_requests
    result = CliRunner().invoke(app, [
        "eval", str(study.exp.questions), "--corpus", str(study.exp.corpus), "--config", str(out),
        "--workdir", str(study.exp.work_dir), "--metrics", "answer_correctness,faithfulness,llm_judge_rating",
        "--json"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout)["metrics"]
    for name in ("recall@5", "answer_correctness", "faithfulness", "llm_judge_rating", "token_f1"):
        assert metrics[name] == pytest.approx(doc["scores"][name], abs=1e-12), name
    assert server.chat_requests == before  # the same calls as the trial's: all from the cache
