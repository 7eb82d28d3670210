"""judge_answers against the fake server: every judge grades each answer against the passages it was given;
usage, refusals, fallbacks and the failure budget."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest
from fake_llm_server import ChatRequest, FakeLLMServer, Reply, server_error

from composer.data.types import Question
from composer.errors import ComposerError
from composer.generation import ANSWER_TEMPLATES, REFUSALS, Answer, Generator, answer_questions
from composer.judges import (
    FailureBudget,
    FailureBudgetExceeded,
    JudgeSettings,
    allowed_failures,
    judge_answers,
    make_judges,
    require_llm,
)
from composer.llm import LLMClient, LLMConfig, Usage, track_usage
from composer.llm.prompt import PromptLanguage

ANSWERS: dict[str, str] = {"ar": "تأسست جامعة القاهرة عام 1908", "fa": "مادرید", "en": "In 1908."}


def is_generation(req: ChatRequest) -> PromptLanguage | None:
    for lang, template in ANSWER_TEMPLATES["grounded"].items():
        if req.system == template.system:
            return lang
    return None


def route(req: ChatRequest) -> Reply | str:
    """Answers by language (a refusal when the passages hold no answer), then the judges' replies."""
    lang = is_generation(req)
    if lang is not None:
        return REFUSALS[lang] if "NO ANSWER HERE" in req.prompt else ANSWERS[lang]
    if '"statements"' in req.system:
        return '{"statements": ["only statement"]}'
    if '"reason"' in req.system and '"verdicts"' in req.system:  # faithfulness
        return '{"verdicts": [1]}' if "1908" in req.prompt or "مادرید" in req.prompt else '{"verdicts": [0]}'
    if '"answer": [1, 0]' in req.system:  # correctness
        return '{"answer": [1], "reference": [1]}'
    if '"rating"' in req.system:
        return '{"rating": 5, "reason": "exact"}'
    raise AssertionError(req.system[:60])


def load_unanswerable(persianqa_dir: Path, n: int) -> list[Question]:
    rows = [
        json.loads(line) for line in (persianqa_dir / "questions_unanswerable.jsonl").open(encoding="utf-8")
    ][:n]
    return [
        Question(r["id"], r["question"], tuple(r["relevant_ids"]), r["reference_answer"] or None)
        for r in rows
    ]


QUESTIONS = [
    Question("ar1", "متى تأسست جامعة القاهرة؟", ("d-ar",), "عام 1908"),
    Question("fa1", "پایتخت اسپانیا کجاست؟", ("d-fa",), "مادرید"),
    Question("en1", "When was Cairo University founded?", ("d-en",), "1908"),
]
CONTEXTS = [
    ["تأسست جامعة القاهرة عام 1908.", "نص آخر"],
    ["مادرید پایتخت اسپانیا است."],
    ["Cairo University was founded in 1908."],
]


@pytest.fixture()
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(route) as srv:
        yield srv


def config(server: FakeLLMServer, **overrides: object) -> LLMConfig:
    settings: dict[str, object] = {
        "model": "openai/gen",
        "api_base": server.url,
        "timeout": 5.0,
        "backoff_base": 0.01,
        "backoff_max": 0.05,
        "price": {"input": 1.0, "output": 2.0},
        "temperature": 0.3,
        **overrides,
    }
    return LLMConfig.model_validate(settings)


def judge_client(server: FakeLLMServer, tmp_path: Path, **overrides: object) -> LLMClient:
    return LLMClient(config(server, temperature=0.0, **overrides), cache_dir=tmp_path)


def generated(
    server: FakeLLMServer, tmp_path: Path, questions: list[Question], contexts: list[list[str]]
) -> dict[str, Answer]:
    return answer_questions(questions, contexts, Generator(LLMClient(config(server), cache_dir=tmp_path)))


def test_every_judge_grades_each_answer_against_its_own_contexts(
    server: FakeLLMServer, tmp_path: Path, persianqa_dir: Path
) -> None:
    unanswerable = load_unanswerable(persianqa_dir, 3)
    questions = [*QUESTIONS, *unanswerable]
    contexts = [*CONTEXTS, *(["NO ANSWER HERE"] for _ in unanswerable)]
    answers = generated(server, tmp_path, questions, contexts)
    assert {q.id: answers[q.id].text for q in questions} == {
        **{q.id: ANSWERS[q.id[:2]] for q in QUESTIONS},
        **{q.id: REFUSALS["fa"] for q in unanswerable},
    }
    settings = JudgeSettings(metrics=("answer_correctness", "faithfulness", "llm_judge_rating"))
    judges = make_judges(judge_client(server, tmp_path), settings)
    counted: list[int] = []
    with track_usage() as usage:
        judged = judge_answers(questions, answers, judges, on_judged=counted.append)
    for q in QUESTIONS:
        metrics = judged[q.id].metrics
        assert metrics["answer_correctness"] == 1.0 and metrics["faithfulness"] == 1.0
        assert metrics["grounded"] == 1.0 and metrics["llm_judge_rating"] == 1.0
    for q in unanswerable:  # a refusal is counted, never graded as a hallucination
        assert (
            judged[q.id].metrics["faithfulness"] is None and judged[q.id].reasons["faithfulness"] == "refusal"
        )
    assert judged["ar1"].details["faithfulness"]["grounded"] is True
    assert sum(counted) == len(questions)
    # The judges read the passages the answer was given (the first one holds 1908, the second does not).
    faithfulness = [r for r in server.received if '"verdicts"' in r.system and "نص آخر" in r.prompt]
    assert faithfulness and all("1908" in r.prompt for r in faithfulness)
    assert all(r.body["temperature"] == 0.0 for r in server.received if not is_generation(r))
    assert usage.requests > 0 and usage.cost == pytest.approx(
        (usage.prompt_tokens * 1.0 + usage.completion_tokens * 2.0) / 1e6
    )


def test_rerun_costs_nothing(server: FakeLLMServer, tmp_path: Path) -> None:
    answers = generated(server, tmp_path, QUESTIONS, CONTEXTS)
    judges = make_judges(judge_client(server, tmp_path), JudgeSettings())
    first = judge_answers(QUESTIONS, answers, judges)
    paid = server.chat_requests
    with track_usage() as usage:
        second = judge_answers(
            QUESTIONS, answers, make_judges(judge_client(server, tmp_path), JudgeSettings())
        )
    assert server.chat_requests == paid
    assert {q: s.metrics for q, s in second.items()} == {q: s.metrics for q, s in first.items()}
    assert usage.cost == 0.0 and usage.cached == usage.calls > 0


def test_failed_answers_are_not_judged(server: FakeLLMServer, tmp_path: Path) -> None:
    def flaky(req: ChatRequest) -> Reply | str:
        return server_error(500) if is_generation(req) == "fa" else route(req)

    server.route = flaky
    answers = answer_questions(
        QUESTIONS, CONTEXTS, Generator(LLMClient(config(server, max_retries=1), cache_dir=tmp_path))
    )
    assert answers["fa1"].failed and answers["fa1"].result is not None
    assert answers["fa1"].result.error_kind == "server_error"
    judged = judge_answers(QUESTIONS, answers, make_judges(judge_client(server, tmp_path), JudgeSettings()))
    assert set(judged) == {"ar1", "en1"}


def test_judge_failures_fall_back_counted_apart_not_as_failed(server: FakeLLMServer, tmp_path: Path) -> None:
    answers = generated(server, tmp_path, QUESTIONS, CONTEXTS)
    server.route = lambda req: "Sorry, I can't produce JSON today."
    settings = JudgeSettings(metrics=("answer_correctness",))
    judged = judge_answers(
        QUESTIONS, answers, make_judges(judge_client(server, tmp_path, max_retries=0), settings)
    )
    en = judged["en1"]
    assert not en.failed and en.fell_back  # scored: a judge fallback, not a failed sample
    assert en.fallbacks[0].startswith("answer_correctness: judge failed (bad_response")
    assert en.metrics["answer_correctness"] is not None  # the token F1 fallback scored it
    assert "fell back to token_f1" in en.reasons["answer_correctness"]


@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")
def test_judging_stops_once_failures_pass_the_allowance(server: FakeLLMServer, tmp_path: Path) -> None:
    questions = [Question(f"q{i}", f"Question number {i}?", reference_answer="x") for i in range(40)]
    answers = {q.id: Answer("an answer with words", "en", None, ("some passage",)) for q in questions}
    server.route = lambda req: server_error(500)
    settings = JudgeSettings(metrics=("faithfulness",), fallback=False)
    judges = make_judges(judge_client(server, tmp_path, max_retries=0, max_concurrency=2), settings)
    judged = judge_answers(questions, answers, judges, max_failures=4)
    assert sum(s.failed for s in judged.values()) == 5 and len(judged) < 40
    assert server.chat_requests < 40  # the remaining calls were cancelled, not paid for


def test_the_failure_budget_counts_the_whole_run() -> None:
    budget = FailureBudget(40, 0.1)
    assert budget.allowed == 4 == allowed_failures(40, 0.1) and allowed_failures(3, 0.0) == 0
    budget.spend(1, Usage(), "generation")
    budget.spend(2, Usage(), "judge")
    assert budget.remaining == 1
    with pytest.raises(FailureBudgetExceeded) as raised:
        budget.spend(2, Usage(), "judge")
    message = str(raised.value)
    assert message.startswith("5 of 40 samples failed, above the allowed share of 10%: ")
    assert "1 of 40 answers failed to generate; the judge failed on 4 of 40 samples" in message
    assert FailureBudgetExceeded.stages_in(message) == ["generation", "judge"]


def test_missing_llm_is_a_clear_error() -> None:
    with pytest.raises(ComposerError, match=r"llm\.model"):
        require_llm(["recall@10", "answer_correctness"], None)
    require_llm(["recall@10", "ndcg@10"], None)  # retrieval metrics need no LLM
