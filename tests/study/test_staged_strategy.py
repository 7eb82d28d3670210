"""``strategy: staged`` against the local scripted server: stage 1 (a study of its own, ``<name>.retrieval``)
sends no LLM request, stage 2 runs only on stage 1's ``top_n`` best retrieval configurations, the same
``n_trials`` cost fewer LLM calls than the joint search, a rerun sends nothing for finished work, the
winner exports as a joint study's does, and a bad staged set-up is one located error (exit 2)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from pathlib import Path
from typing import Any

import optuna
import pytest
from fake_llm_server import FakeLLMServer
from sample_study import write_experiment
from typer.testing import CliRunner

from composer.cli.app import app
from composer.record import TrialRecord
from composer.study.experiment import load_experiment
from composer.study.fate import fate_of
from composer.study.space import SearchSpace
from composer.study.space_file import parse_search_space
from composer.study.staged import STAGED_ATTR, retrieval_space, split_dimensions

RETRIEVAL = {"retrieval.mode": {"choices": ["bm25"]}, "retrieval.k": {"choices": [1, 3, 5]}}
DIMS = {**RETRIEVAL, "generation.template": {"choices": ["concise", "grounded"]}}
OBJECTIVE = {"k": 3, "metrics": {"recall": 1, "ndcg": 1, "answer_correctness": 1}}
N_QUESTIONS = 8


def experiment(root: Path, server: FakeLLMServer | None, **fields: Any) -> Path:
    llm = None if server is None else {"model": "openai/fake", "api_base": server.url,
                                       "price": {"input": 1.0, "output": 2.0}}
    judge = None if server is None else {"metrics": ["answer_correctness"]}
    return write_experiment(root, dims=fields.pop("dims", DIMS), n_questions=N_QUESTIONS, objective=OBJECTIVE,
                            llm=llm, judge=judge, batch_size=N_QUESTIONS, **fields)


def optimize(path: Path, *args: str) -> str:
    result = CliRunner().invoke(app, ["optimize", str(path), *args])
    assert result.exit_code == 0, result.output
    return result.output


def trials(path: Path, name: str) -> list[optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name=name, storage=load_experiment(path).storage_url)
    return study.get_trials(deepcopy=False)


def requests(trial: optuna.trial.FrozenTrial) -> int:
    record = TrialRecord.of(trial)
    assert record is not None
    return int(record.llm_usage.get("llm_requests", 0))


@pytest.mark.slow
def test_stage_one_calls_no_llm_and_stage_two_keeps_to_its_best(tmp_path: Path,
                                                                 fake_llm: FakeLLMServer) -> None:
    path = experiment(tmp_path, fake_llm, strategy="staged", n_trials=5,
                      stages={"retrieval_trials": 3, "top_n": 2})
    out = optimize(path)
    assert "study s.retrieval" in out and "study s:" in out
    first = trials(path, "s.retrieval")
    assert [fate_of(t) for t in first].count("complete") >= 2
    assert all(requests(t) == 0 for t in first)  # no answer, no judge, no expansion in stage 1
    assert all(set(t.params) == set(RETRIEVAL) for t in first)
    second = trials(path, "s")
    storage = load_experiment(path).storage_url
    recorded = optuna.load_study(study_name="s", storage=storage).user_attrs[STAGED_ATTR]
    values = {t.params["retrieval.k"]: t.value or 0.0 for t in first if fate_of(t) == "complete"}
    assert len(recorded["top"]) == 2 and recorded["composites"] == sorted(values.values(), reverse=True)[:2]
    assert [values[p["retrieval.k"]] for p in recorded["top"]] == recorded["composites"]
    assert [fate_of(t) for t in second].count("complete") == 2
    for t in second:
        assert {k: t.params[k] for k in RETRIEVAL} in recorded["top"]
        assert "generation.template" in t.params
    sent = fake_llm.stats()["chat_requests"]
    assert sent == sum(requests(t) for t in second) > 0  # every request the server saw was stage 2's

    again = optimize(path)  # resumed: nothing left in either stage
    assert fake_llm.stats()["chat_requests"] == sent
    assert "s.retrieval" not in again and "0 to run" in again  # stage 1 closed, stage 2 done
    assert len(trials(path, "s")) == len(second)
    assert len(trials(path, "s.retrieval")) == len(first)
    exported = CliRunner().invoke(app, ["export", "s", "-e", str(path), "--out", str(tmp_path / "best.yaml")])
    assert exported.exit_code == 0, exported.output
    assert (tmp_path / "best.yaml").read_text(encoding="utf-8").count("template") == 1


@pytest.mark.slow
def test_staged_costs_fewer_llm_calls_than_joint_for_the_same_trials(tmp_path: Path,
                                                                     fake_llm: FakeLLMServer) -> None:
    sent = {}
    for strategy in ("joint", "staged"):
        fake_llm.reset_counts()
        root = tmp_path / strategy
        root.mkdir()
        staged = strategy == "staged"
        extra: dict[str, Any] = {"stages": {"retrieval_trials": 2, "top_n": 2}} if staged else {}
        path = experiment(root, fake_llm, strategy=strategy, n_trials=6, sampler={"name": "grid", "seed": 0},
                          **extra)
        optimize(path)
        sent[strategy] = fake_llm.stats()["chat_requests"]
        assert sum(fate_of(t) == "complete" for t in trials(path, "s")) == (6 if strategy == "joint" else 4)
    # Joint: the grid's 6 configurations, each with its LLM calls; staged: 2 retrieval trials without any,
    # then stage 1's best 2 x 2 templates.
    assert 0 < sent["staged"] < sent["joint"]


def test_split_puts_llm_calling_and_dependent_dimensions_in_stage_two() -> None:
    space = parse_search_space({
        "retrieval.k": {"choices": [3, 5]},
        "rerank.method": {"choices": ["none", "llm"]},
        "rerank.top_n": {"choices": [5, 10], "when": {"rerank.method": "llm"}},
        "chunking.size": {"choices": [200, 400]},
        "query_expansion.method": {"choices": ["none", "multi_query"]},
        "generation.temperature": {"choices": [0.0, 0.5]},
    })
    first, second = split_dimensions(space)
    assert [d.key for d in first] == ["retrieval.k", "chunking.size"]
    assert [d.key for d in second] == ["rerank.method", "rerank.top_n", "query_expansion.method",
                                       "generation.temperature"]


def test_an_llm_rewrite_of_follow_ups_is_searched_in_stage_two() -> None:
    """Stage 1 calls no LLM: a space that may rewrite follow-ups with one searches the rewrite (and what
    hangs on it) with the generation, and stage 1 runs on concat."""
    space = parse_search_space({
        "retrieval.k": {"choices": [3, 5]},
        "conversation.rewrite": {"choices": ["concat", "llm"]},
        "conversation.window": {"choices": [1, 2], "when": {"conversation.rewrite": "concat"}},
        "generation.temperature": {"choices": [0.0, 0.5]},
    })
    first, second = split_dimensions(space)
    assert [d.key for d in first] == ["retrieval.k"]
    assert [d.key for d in second] == ["conversation.rewrite", "conversation.window",
                                       "generation.temperature"]
    offline = parse_search_space({"conversation.rewrite": {"choices": ["none", "concat"]}})
    assert [d.key for d in split_dimensions(offline)[0]] == ["conversation.rewrite"]
    llm_default = SearchSpace((), {"conversation": {"rewrite": "llm", "window": 3}}, "space")
    assert retrieval_space(llm_default, []).defaults["conversation"] == {"rewrite": "concat", "window": 3}


@pytest.mark.parametrize(
    ("fields", "dims", "says"),
    [
        ({"stages": {"top_n": 0}}, DIMS, "stages.top_n"),
        ({}, RETRIEVAL, "needs generation"),
        ({"stages": {"retrieval_trials": 4}, "n_trials": 4}, DIMS, "leaves none of n_trials (4)"),
        ({"objective": {"metrics": {"answer_correctness": 1}}}, DIMS, "retrieval metrics"),
    ],
)
def test_a_bad_staged_setup_is_one_error_and_runs_nothing(
    tmp_path: Path, fields: dict[str, Any], dims: dict[str, Any], says: str
) -> None:
    path = write_experiment(tmp_path, dims=dims, n_questions=N_QUESTIONS,
                            **{"objective": OBJECTIVE, "strategy": "staged", **fields})
    result = CliRunner().invoke(app, ["optimize", str(path)])
    assert result.exit_code == 2, result.output
    assert says in " ".join(result.output.split()) and "Traceback" not in result.output
    assert not (tmp_path / ".composer" / "optuna.db").exists()


@pytest.mark.slow
def test_stages_without_staged_and_a_strategy_switch_are_refused(tmp_path: Path) -> None:
    path = write_experiment(tmp_path, dims=DIMS, n_questions=N_QUESTIONS, objective=OBJECTIVE,
                            stages={"top_n": 2})
    result = CliRunner().invoke(app, ["optimize", str(path)])
    assert result.exit_code == 2 and "strategy: staged only" in " ".join(result.output.split())
    write_experiment(tmp_path, dims=DIMS, n_questions=N_QUESTIONS, objective=OBJECTIVE, n_trials=2)
    optimize(path)
    write_experiment(tmp_path, dims=DIMS, n_questions=N_QUESTIONS, objective=OBJECTIVE, n_trials=4,
                     strategy="staged")
    result = CliRunner().invoke(app, ["optimize", str(path)])
    assert result.exit_code == 2, result.output
    assert "was run with strategy: joint" in " ".join(result.output.split())
