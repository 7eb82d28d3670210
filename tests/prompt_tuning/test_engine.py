"""The prompt optimizer's engine on a scripted problem: the scripted generator answers correctly only when
the system prompt carries an instruction, and the scripted reflection model proposes (or not) that
instruction once it is shown failures. Scoring goes through a small PromptScorer of Composer's own LLM
client, so requests are counted by purpose and cached as a study's are."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import mlflow
import pytest
from fake_llm_server import ChatRequest, FakeLLMServer

from composer.data.types import Question, QuestionSet
from composer.evaluation.report import EvaluationReport
from composer.evaluation.table import SampleRecord
from composer.llm.client import LLMClient
from composer.llm.config import LLMConfig
from composer.llm.spend import Spend
from composer.objective import Objective
from composer.prompt_tuning.config import PromptTuningConfig
from composer.prompt_tuning.engine import optimize
from composer.prompt_tuning.result import PromptOptimization
from composer.prompt_tuning.scorer import ScoredPrompt
from composer.prompts import UserPrompt
from composer.prompts.registry import load_registered
from composer.study.prompt_stage import StudyResults
from composer.tracking.evaluation import open_experiment
from composer.tracking.prompt_runs import PARENT_CANDIDATE_TAG, PromptRunTarget

INSTRUCTION = "ANSWER-WITH-THE-GOLD-WORD"
"""What the scripted generator needs in the system message to answer right."""
LUCKY = "LUCKY-ON-ALPHA"
"""An instruction that helps on the selection questions (all about "alpha") and not on held-out ones."""
REFLECTION_MARK = "Write a better version of this message"
SEED = UserPrompt(system="You answer questions from the passages.",
                  user="Passages:\n{contexts}\n\nQuestion: {question}")


def questions(topic: str, n: int) -> QuestionSet:
    return QuestionSet([Question(f"{topic}-{i}", f"what is {topic} {i}?", answers=(f"gold{topic}{i}",))
                        for i in range(n)])


SELECTION = questions("alpha", 6)
HELD_OUT = questions("beta", 6)
GOLDS = {q.question: q.answers[0] for q in (*SELECTION, *HELD_OUT)}


def generator_reply(req: ChatRequest) -> str:
    question = next(q for q in GOLDS if q in req.prompt)
    if INSTRUCTION in req.system or (LUCKY in req.system and "alpha" in question):
        return GOLDS[question]
    return "I do not know."


def route_of(proposal: Callable[[str], str]) -> Callable[[ChatRequest], str]:
    """The scripted server: reflection requests answered by ``proposal(prompt)``, the rest as a generator."""
    def route(req: ChatRequest) -> str:
        if REFLECTION_MARK in req.prompt:
            return proposal(req.prompt)
        return generator_reply(req)
    return route


def proposing(instruction: str) -> Callable[[str], str]:
    """A reflection model that adds ``instruction`` to the system message, once it has seen a failure
    (a score of 0 and the expected answer); it leaves a user message as it is."""
    def propose(prompt: str) -> str:
        current = prompt.split("```")[1].strip()
        if "{question}" in current or "expected gold" not in prompt or "Score\n0" not in prompt:
            return f"```\n{current}\n```"
        return f"```\n{current} {instruction}\n```"
    return propose


class ScriptedScorer:
    """Sends each question with the prompt through Composer's client; a question is right (1) when the
    answer is its gold word."""

    objective = Objective({"correct": 1.0})

    def __init__(self, client: LLMClient) -> None:
        self.client = client

    def __call__(self, prompt: UserPrompt, questions: QuestionSet) -> ScoredPrompt:
        messages = prompt.for_language("en")
        records = []
        for q in questions:
            user = messages.user.format(question=q.question, contexts="[1] a passage")
            reply = self.client.complete([{"role": "system", "content": messages.system},
                                          {"role": "user", "content": user}])
            correct = float(reply.text == q.answers[0])
            records.append(SampleRecord(q.id, q.question, answer=reply.text, metrics={"correct": correct}))
        report = EvaluationReport(records, ks=[1], match_mode="id")
        per_question = {r.question_id: float(r.metrics["correct"] or 0.0) for r in records}
        feedback = {r.question_id: f"question: {r.question}\nanswer: {r.answer}\nexpected {q.answers[0]}"
                    for r, q in zip(records, questions, strict=True)}
        return ScoredPrompt(report, self.objective.composite(report.means()), per_question, feedback)


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as running:
        yield running


def run(
    server: FakeLLMServer, tmp_path: Path, proposal: Callable[[str], str], *, results: bool = True,
    max_proposals: int = 4, budget: Callable[[], str | None] | None = None, parent_run_id: str | None = None,
) -> PromptOptimization:
    server.route = route_of(proposal)
    llm = LLMConfig(model="openai/scripted", api_base=server.url, max_retries=0)
    cache = tmp_path / "cache"
    return optimize(
        SEED, ScriptedScorer(LLMClient(llm, cache_dir=cache)), SELECTION, HELD_OUT,
        PromptTuningConfig(max_proposals=max_proposals, minibatch=3, max_metric_calls=60),
        study="scripted", llm=llm,
        tracking=PromptRunTarget(f"sqlite:///{tmp_path / 'mlflow.db'}", "prompts", parent_run_id),
        cache_dir=cache, budget=budget, results=study_results(tmp_path) if results else None,
    )


def study_results(tmp_path: Path) -> StudyResults:
    """The store the CLI keeps results in: a study's attributes (here a study of its own)."""
    import optuna

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    return StudyResults(optuna.create_study(study_name="scripted", storage=storage, load_if_exists=True))


def chat_requests(server: FakeLLMServer) -> tuple[int, int]:
    """(reflection requests, generation requests) the server saw."""
    reflections = sum(REFLECTION_MARK in r.prompt for r in server.received)
    return reflections, len(server.received) - reflections


def test_the_optimized_prompt_wins_and_is_registered_as_version_2(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    result = run(server, tmp_path, proposing(INSTRUCTION))

    assert INSTRUCTION not in result.seed.prompt.for_language("en").system
    assert INSTRUCTION in result.best.prompt.for_language("en").system
    assert result.seed.selection_score == 0.0 and result.best.selection_score == 1.0
    assert result.best.parent == 0 and result.best.index in result.pareto
    assert result.verdict is not None and result.verdict.outcome == "better"
    assert (result.verdict.seed_score, result.verdict.best_score) == (0.0, 1.0)
    assert result.verdict.ci[0] > 0 and result.verdict.n_questions == len(HELD_OUT)
    assert result.registered == "prompts:/scripted.answer/2" and result.promoted
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    champion = load_registered("prompts:/scripted.answer@champion", uri)
    assert champion.version == 2 and INSTRUCTION in champion.for_language("en").system
    assert load_registered("prompts:/scripted.answer/1", uri).sha256 == SEED.sha256  # the lineage shows
    tags = mlflow.MlflowClient(uri, registry_uri=uri).get_prompt_version("scripted.answer", 2).tags
    assert tags["composer.study"] == "scripted" and tags["composer.verdict"] == "better"
    # Every request counted under its purpose: reflection under prompt_proposal, scoring under prompt_eval.
    reflections, generations = chat_requests(server)
    assert reflections >= 1
    assert result.requests == {"prompt_proposal": reflections, "prompt_eval": generations}


def test_a_rerun_of_a_finished_optimization_sends_nothing(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    first = run(server, tmp_path, proposing(INSTRUCTION))
    server.reset_counts()
    again = run(server, tmp_path, proposing(INSTRUCTION))
    assert server.stats()["requests"] == 0
    assert again.requests == {} and again.registered == first.registered == "prompts:/scripted.answer/2"
    assert again.to_dict() == {**first.to_dict(), "requests": {}}


def test_worse_proposals_register_nothing_and_the_reason_says_so(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    result = run(server, tmp_path, proposing("Never answer."), results=False)
    assert result.best.index == 0 and result.verdict is None
    assert result.registered is None and not result.promoted
    assert result.reason == "the seed stays: no proposal scored better on the selection questions"
    assert len(result.candidates) > 1 and not any(c.kept for c in result.candidates[1:])
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert not client.search_prompts()
    # Nothing stored: a rerun sends its requests again, but every one is answered by the LLM cache.
    server.reset_counts()
    again = run(server, tmp_path, proposing("Never answer."), results=False)
    assert server.stats()["requests"] == 0 and again.reason == result.reason


def test_better_on_selection_only_is_judged_on_held_out(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    result = run(server, tmp_path, proposing(LUCKY))
    assert LUCKY in result.best.prompt.for_language("en").system and result.best.selection_score == 1.0
    assert result.verdict is not None and result.verdict.outcome == "no difference"
    assert result.registered is None
    assert result.reason == "the seed stays: held-out difference +0.000 [+0.000, +0.000], no better"


def test_a_proposal_that_fails_the_template_check_is_never_scored(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    result = run(server, tmp_path, lambda prompt: "```\nAnswer {bogus} now.\n```", max_proposals=3)
    assert result.discarded == 3 and len(result.candidates) == 1
    assert not any("{bogus}" in m.get("content", "") or "Answer  now" in m.get("content", "")
                   for r in server.received if REFLECTION_MARK not in r.prompt for m in r.messages)
    assert result.best.index == 0 and result.registered is None


def test_the_budget_stops_the_search_between_candidates(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    result = run(server, tmp_path, proposing(INSTRUCTION), budget=lambda: "stop.max_llm_calls reached")
    assert chat_requests(server)[0] == 0 and len(result.candidates) == 1
    assert result.reason == ("the seed stays: stop.max_llm_calls reached: the search stopped before a "
                             "proposal beat it")
    assert not (tmp_path / "results").exists()  # not stored: a rerun with a larger budget goes on


def test_a_budget_spent_by_the_search_leaves_out_the_held_out_re_score(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    def budget() -> str | None:
        return "stop.max_llm_calls reached" if chat_requests(server)[0] else None

    result = run(server, tmp_path, proposing(INSTRUCTION), budget=budget)
    assert INSTRUCTION in result.best.prompt.for_language("en").system
    assert not any("beta" in r.prompt for r in server.received)  # no held-out question was sent
    assert result.verdict is None and result.registered is None
    assert result.reason == ("the seed stays: stop.max_llm_calls reached: the search stopped before the "
                             "held-out re-score")


def test_mlflow_shows_each_candidate_with_its_parent_and_text(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    client, experiment_id = open_experiment(f"sqlite:///{tmp_path / 'mlflow.db'}", "prompts")
    study_run = client.create_run(experiment_id, run_name="the study").info.run_id
    result = run(server, tmp_path, proposing(INSTRUCTION), parent_run_id=study_run)
    assert result.run_id is not None
    optimization = client.get_run(result.run_id)
    assert optimization.data.tags["mlflow.parentRunId"] == study_run
    assert optimization.data.tags["composer.verdict"] == "better"
    assert optimization.data.metrics["held_out_difference"] == 1.0
    children = client.search_runs([experiment_id],
                                  filter_string=f"tags.`mlflow.parentRunId` = '{result.run_id}'")
    assert len(children) == len(result.candidates)
    by_name = {run.info.run_name: run for run in children}
    best = by_name[f"candidate {result.best.index}"]
    assert best.data.tags[PARENT_CANDIDATE_TAG] == "0" and best.data.params["parent_candidate"] == "0"
    assert best.data.metrics["selection_score"] == 1.0
    assert PARENT_CANDIDATE_TAG not in by_name["candidate 0"].data.tags
    text = Path(client.download_artifacts(best.info.run_id, "prompt.yaml", str(tmp_path))).read_text("utf-8")
    assert INSTRUCTION in text


def test_counts_add_to_the_callers_spend(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    """What a study spent on the optimization shows in its own counters, by purpose."""
    spend = Spend()
    server.route = route_of(proposing(INSTRUCTION))
    llm = LLMConfig(model="openai/scripted", api_base=server.url, max_retries=0)
    result = optimize(
        SEED, ScriptedScorer(LLMClient(llm, cache_dir=tmp_path)), SELECTION, HELD_OUT,
        PromptTuningConfig(max_proposals=1, minibatch=3), study="s", llm=llm,
        tracking=PromptRunTarget(f"sqlite:///{tmp_path / 'mlflow.db'}", "prompts"), cache_dir=tmp_path,
        spend=spend,
    )
    assert {p: int(u["llm_requests"]) for p, u in spend.by_purpose.items()} == result.requests
    assert set(result.requests) == {"prompt_proposal", "prompt_eval"}
