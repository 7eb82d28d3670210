"""Numbers that cannot mislead (issue 19.1-19.3): the held-out difference is the difference of the held-out
scores, with its CI around it; refusing answerable questions never wins; a study reopened with another
objective or search space refuses (exit 2) instead of mixing trials."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import optuna
import pytest
from fake_llm_server import ChatRequest, FakeLLMServer, Reply
from sample_study import SAMPLE, write_experiment
from scripted_llm import ScriptedRAG, kind_of
from typer.testing import CliRunner

from composer.cli.app import app
from composer.data import load_corpus, load_questions, load_ranking_file
from composer.data.types import QuestionSet
from composer.errors import ComposerError
from composer.evaluation.given import evaluate_ranking
from composer.evaluation.report import EvaluationReport
from composer.evaluation.scoring import BatchHook, RankingPipeline, Scored
from composer.generation import REFUSALS
from composer.index.bm25 import Progress
from composer.objective import Objective, ObjectiveConfig
from composer.study._compat import ATTR, check_unchanged
from composer.study.data import StudyData
from composer.study.experiment import load_experiment
from composer.study.space_file import parse_search_space

Columns = dict[str, npt.NDArray[np.float64]]
NAN = np.nan

# -- 19.1: one composite for the scores, the difference and its CI -------------------------------------

OBJECTIVE = Objective({"recall@5": 0.5, "token_f1": 0.5})
# A: perfect retrieval, one poor answer scored (nine unscored); B: weaker retrieval, fair answers everywhere.
A: Columns = {"recall@5": np.ones(10), "token_f1": np.array([0.1, *[NAN] * 9])}
B: Columns = {"recall@5": np.full(10, 0.8), "token_f1": np.full(10, 0.6)}


def renormalized_per_question_difference(a: Columns, b: Columns) -> float:
    """The old definition: the mean of per-question composites, weights renormalized per question."""

    def per_question(columns: Columns) -> list[float]:
        out = []
        for row in range(10):
            scored = {k: v[row] for k, v in columns.items() if not np.isnan(v[row])}
            total = sum(OBJECTIVE.weights[k] for k in scored)
            out.append(sum(OBJECTIVE.weights[k] * v for k, v in scored.items()) / total)
        return out

    return float(np.mean(per_question(a)) - np.mean(per_question(b)))


def means(columns: Columns) -> dict[str, float | None]:
    return {k: float(v[~np.isnan(v)].mean()) for k, v in columns.items()}


def test_the_difference_is_the_difference_of_the_composites_where_the_definitions_disagree() -> None:
    score_a, score_b = OBJECTIVE.composite(means(A)), OBJECTIVE.composite(means(B))
    assert (score_a, score_b) == pytest.approx((0.55, 0.7))
    assert renormalized_per_question_difference(A, B) > 0  # the old difference: the other sign
    diff, (low, high) = OBJECTIVE.difference(A, B)
    assert diff == pytest.approx(score_a - score_b, abs=1e-12) and diff < 0
    assert low <= diff <= high and low < high
    assert OBJECTIVE.difference(A, B) == (diff, (low, high))  # seeded: reproducible to the digit
    flipped, (f_low, f_high) = OBJECTIVE.difference(B, A)
    assert flipped == pytest.approx(-diff) and (f_low, f_high) == pytest.approx((-high, -low))


DIMS: dict[str, Any] = {"retrieval.mode": {"choices": ["bm25"]},
                        "chunking.method": {"choices": ["paragraph", "sentence"]},
                        "retrieval.k": {"choices": [3, 5]}}
METRICS = {"recall": 1, "token_f1": 1}


def numbers_study(root: Path, *, n_questions: int = 20, metrics: dict[str, float] = METRICS,
                  dims: dict[str, Any] = DIMS, defaults: dict[str, Any] | None = None, **fields: Any) -> Path:
    """The sample study "numbers": two random BM25 trials, recall and token F1 weighted by ``metrics``."""
    return write_experiment(root, dims=dims, defaults=defaults, n_questions=n_questions, name="numbers",
                            objective={"k": 5, "metrics": metrics}, batch_size=20, **fields)


@pytest.mark.slow
def test_the_held_out_verdict_reads_the_held_out_scores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A study whose winner and runner-up re-score as A and B (10 held-out questions): the verdict's
    difference is their scores' difference (the old one had the other sign), its CI around it."""
    exp_file = numbers_study(tmp_path, n_questions=40, split={"held_out": 0.25, "seed": 0})
    score = StudyData.score
    rescored: list[Columns] = []

    def rescoring_as_a_then_b(self: StudyData, pipeline: RankingPipeline, questions: QuestionSet, *,
                              batch_size: int | None = None, on_batch: BatchHook | None = None,
                              on_stage: Progress | None = None,
                              on_failure: Callable[[Scored], None] | None = None) -> Scored:
        scored = score(self, pipeline, questions, batch_size=batch_size, on_batch=on_batch, on_stage=on_stage,
                       on_failure=on_failure)
        if on_batch is not None:
            return scored  # a trial
        columns = (A, B)[len(rescored)]
        rescored.append(columns)
        table = dataclasses.replace(scored.report.table, metrics={**scored.report.table.metrics, **columns})
        report = EvaluationReport(table, scored.report.ks, scored.report.match_mode, scored.report.meta)
        return dataclasses.replace(scored, report=report)

    monkeypatch.setattr(StudyData, "score", rescoring_as_a_then_b)
    result = CliRunner().invoke(app, ["optimize", str(exp_file)])
    assert result.exit_code == 0, result.output
    assert len(rescored) == 2
    study = optuna.load_study(study_name="numbers", storage=load_experiment(exp_file).storage_url)
    held = study.user_attrs["held_out"]
    winner, runner_up = held["winner"]["held_out_composite"], held["runner_up"]["held_out_composite"]
    assert (winner, runner_up) == pytest.approx((0.55, 0.7))
    difference = held["difference"]
    assert difference["mean"] == pytest.approx(winner - runner_up, abs=1e-12)
    low, high = difference["ci95"]
    assert low <= difference["mean"] <= high
    assert difference["n_paired"] == 10 and not difference["winner_really_better"]
    assert f"winner #{held['winner']['trial']} 0.5500 vs runner-up #{held['runner_up']['trial']} 0.7000; " \
           "difference -0.1500" in result.output


# -- 19.2: refusing answerable questions scores 0 on the answer metrics ---------------------------------

N = 10
ANSWERED_BY_THE_REFUSER = 2
WRONG = "مدينة برلين الألمانية"


def sample_questions(n: int = N) -> QuestionSet:
    corpus = load_corpus(SAMPLE / "corpus.jsonl")
    questions = load_questions(SAMPLE / "questions.jsonl", corpus=corpus)
    return QuestionSet(list(questions)[:n], questions.source)


def test_a_refusing_system_scores_below_an_answering_one_without_a_judge() -> None:
    """The answering system answers 6 of 10 right and 4 wrong; the refuser answers 2 right and refuses 8.
    Left out of the means, the refusals made the refuser's F1 1.0 against 0.6."""
    questions = sample_questions()
    corpus = load_corpus(SAMPLE / "corpus.jsonl")
    run = load_ranking_file(SAMPLE / "bm25-run.jsonl")
    items = list(questions)
    answering = {q.id: q.gold_answers[0] if i < 6 else WRONG for i, q in enumerate(items)}
    refusing = {q.id: q.gold_answers[0] if i < ANSWERED_BY_THE_REFUSER else REFUSALS["ar"]
                for i, q in enumerate(items)}
    reports = {name: evaluate_ranking(questions, run, ks=(5,), corpus=corpus, answers=answers)
               for name, answers in (("answering", answering), ("refusing", refusing))}
    summaries = {name: report.summary() for name, report in reports.items()}
    answer_metrics = summaries["answering"]["metrics"]
    refuser_metrics = summaries["refusing"]["metrics"]
    for metric in ("token_f1", "exact_match"):
        assert refuser_metrics[metric] < answer_metrics[metric], metric
        assert summaries["refusing"]["n_scored"][metric] == N  # refusals scored (0), not left out
    assert refuser_metrics["token_f1"] == pytest.approx(ANSWERED_BY_THE_REFUSER / N)
    assert refuser_metrics["answer_refusal_rate"] == pytest.approx(0.8)
    assert summaries["refusing"]["skipped"] == {"refusal": 8}  # counted
    assert summaries["refusing"]["n_scored"]["faithfulness_overlap"] == ANSWERED_BY_THE_REFUSER  # no claim
    objective = Objective.resolve(ObjectiveConfig(k=5, metrics={"recall": 1, "answer_correctness": 1}),
                                  reports["answering"].means())
    composites = {name: objective.composite(report.means()) for name, report in reports.items()}
    assert composites["refusing"] < composites["answering"]


class PartlyWrong(ScriptedRAG):
    """Answers the questions in ``golds``, wrongly where ``wrong`` says so (the judge then finds nothing
    right in them); refuses the others, as the answer templates tell a model to."""

    def __init__(self, golds: dict[str, str], wrong: set[str]) -> None:
        super().__init__(golds)
        self.wrong = wrong

    def __call__(self, req: ChatRequest) -> Reply | str:
        kind = kind_of(req)
        if kind == "generate" and self.question_of(req) in self.wrong:
            self.seen.append(kind)
            return WRONG
        if kind == "correctness" and WRONG in req.prompt:
            self.seen.append(kind)
            return '{"answer": [0], "reference": [0]}'
        return super().__call__(req)


def run_llm_eval(tmp_path: Path, name: str, route: PartlyWrong) -> dict[str, Any]:
    lines = (SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()[:N]
    questions = tmp_path / "questions.jsonl"
    questions.write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = tmp_path / "pipeline.yaml"
    config.write_text("retrieval: {mode: bm25, k: 3}\ngeneration: {template: concise, max_contexts: 3}\n",
                      encoding="utf-8")
    with FakeLLMServer(route) as server:
        result = CliRunner().invoke(app, [
            "eval", str(questions), "--corpus", str(SAMPLE / "corpus.jsonl"), "--config", str(config),
            "--workdir", str(tmp_path / name), "--llm", "openai/fake", "--llm-base", server.url,
            "--metrics", "answer_correctness,llm_judge_rating", "--json"])
    assert result.exit_code == 0, result.output
    summary: dict[str, Any] = json.loads(result.stdout)
    return summary


def test_a_refusing_generator_scores_below_an_answering_one_with_llm_judges(tmp_path: Path) -> None:
    items = list(sample_questions())
    golds = {q.question: q.gold_answers[0] for q in items}
    answering = run_llm_eval(tmp_path, "answering", PartlyWrong(golds, {q.question for q in items[6:]}))
    refuser = PartlyWrong({q.question: golds[q.question] for q in items[:ANSWERED_BY_THE_REFUSER]}, set())
    refusing = run_llm_eval(tmp_path, "refusing", refuser)
    assert refusing["metrics"]["answer_refusal_rate"] == pytest.approx(0.8)
    assert refusing["skipped"] == {"refusal": 8}
    for metric in ("answer_correctness", "llm_judge_rating", "token_f1"):
        assert refusing["metrics"][metric] < answering["metrics"][metric], metric
        assert refusing["n_scored"][metric] == N, metric  # each refusal scored 0
    assert refuser.count("correctness") == ANSWERED_BY_THE_REFUSER  # a refusal costs no judge call


# -- 19.3: another objective or search space refuses to mix with the study's trials ---------------------


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A study stopped after 1 of its 2 trials (``--n-trials 1``), to be continued."""
    root = tmp_path_factory.mktemp("compat")
    exp_file = numbers_study(root)
    result = CliRunner().invoke(app, ["optimize", str(exp_file), "--n-trials", "1"])
    assert result.exit_code == 0, result.output
    return exp_file


def rerun(exp_file: Path, *, n_trials: int = 1, **change: Any) -> Any:
    """Continue the study (same name, same work dir) from changed files written beside the original."""
    changed = numbers_study(exp_file.parent, file="changed.yaml", search_space="changed-space.yaml", **change)
    return CliRunner().invoke(app, ["optimize", str(changed), "--n-trials", str(n_trials)])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"metrics": {"recall": 1}},
         'objective changed: metrics {"recall": 0.5, "token_f1": 0.5} -> {"recall": 1.0}'),
        ({"metrics": {"recall": 3, "token_f1": 1}},
         'objective changed: weights {"recall": 0.5, "token_f1": 0.5} -> {"recall": 0.75, "token_f1": 0.25}'),
        ({"defaults": {"chunking": {"size": 600}}},
         'search space changed: defaults chunking.size "(unset)" -> 600'),
        ({"dims": {**DIMS, "retrieval.k": {"choices": [3, 10]}}},
         "search space changed: retrieval.k choices [3, 5] -> [3, 10]"),
        ({"dims": {**DIMS, "rerank.method": {"choices": ["none", "mmr"]}}},
         "search space changed: dimension rerank.method added"),
    ],
    ids=["metrics", "weights", "defaults", "choices", "dimension"],
)
def test_a_changed_objective_or_space_refuses_with_what_changed(
    stopped: Path, change: dict[str, Any], message: str
) -> None:
    result = rerun(stopped, **change)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "study 'numbers' was run with another objective or search space" in result.output
    assert "--study-name numbers-2" in result.output and "Traceback" not in result.output
    assert "CategoricalDistribution" not in result.output
    trials = optuna.load_study(study_name="numbers", storage=load_experiment(stopped).storage_url).trials
    assert len(trials) == 1  # nothing ran


@pytest.mark.slow
def test_an_unchanged_study_resumes_and_a_new_name_starts_afresh(stopped: Path) -> None:
    # The same objective written with other but proportional weights is the same objective.
    result = rerun(stopped, metrics={"recall": 2, "token_f1": 2}, n_trials=2)
    assert result.exit_code == 0, result.output
    assert "study numbers: 1 trials finished, 1 to run" in result.output
    storage = load_experiment(stopped).storage_url
    assert len(optuna.load_study(study_name="numbers", storage=storage).trials) == 2
    changed = rerun(stopped, dims={**DIMS, "retrieval.k": {"choices": [3, 10]}})
    assert changed.exit_code == 2 and "--study-name numbers-2" in changed.output
    fresh = CliRunner().invoke(app, ["optimize", str(stopped.parent / "changed.yaml"), "--n-trials", "1",
                                     "--study-name", "numbers-2"])
    assert fresh.exit_code == 0, fresh.output
    assert "study numbers-2: 0 trials finished" in fresh.output


def test_the_objective_and_space_are_stored_masked_and_compared() -> None:
    """Without a study run: what is stored (credentials masked), what compares equal, the free name."""
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name="s")
    secret = {"embedding": {"provider": "litellm", "model": "openai/m", "api_base": "https://u:pw@llm.example/v1"}}
    space = parse_search_space({"defaults": secret, "dimensions": DIMS})
    objective = ObjectiveConfig(k=5, metrics={"recall": 1, "token_f1": 1})
    check_unchanged(study, storage, objective, space)
    stored = study.user_attrs[ATTR]
    assert stored["search_space"]["dimensions"]["retrieval.k"] == {"choices": [3, 5]}
    assert stored["search_space"]["defaults"]["embedding"]["api_base"] == "https://***@llm.example/v1"
    assert "pw" not in json.dumps(stored)
    check_unchanged(study, storage, ObjectiveConfig(k=5, metrics={"recall": 4, "token_f1": 4}), space)
    optuna.create_study(storage=storage, study_name="s-2")
    with pytest.raises(ComposerError, match=r"objective changed: k 5 -> 10.*name=.s-3.") as changed:
        check_unchanged(study, storage, ObjectiveConfig(k=10, metrics={"recall": 1, "token_f1": 1}), space)
    assert "--study-name s-3" in changed.value.cli_message()  # the API's words above, the CLI's flag here
