"""answer_and_judge end to end against the fake server: answers, metrics, usage, refusals, failure budget."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest
from fake_llm_server import ChatRequest, FakeLLMServer, Reply, server_error

from composer.data.types import Hit, Question
from composer.errors import ComposerError
from composer.generation import ANSWER_TEMPLATES, REFUSALS, contexts_for
from composer.judges import (
    FailureBudgetExceeded,
    JudgeSettings,
    answer_and_judge,
    answer_refusal_rate,
    check_failure_budget,
    refusal_accuracy,
    require_llm,
)
from composer.llm import LLMClient, LLMConfig
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
RUN = {
    "ar1": [Hit("d-ar#0", 2.0, doc_id="d-ar"), Hit("other", 1.0, text="نص آخر")],
    "fa1": [Hit("d-fa", 2.0, text="مادرید پایتخت اسپانیا است.")],
    "en1": [Hit("d-en", 3.0, text="Cairo University was founded in 1908.")],
}
TEXTS = {"d-ar": "تأسست جامعة القاهرة عام 1908."}


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


def test_answers_and_judges_every_question(
    server: FakeLLMServer, tmp_path: Path, persianqa_dir: Path
) -> None:
    unanswerable = load_unanswerable(persianqa_dir, 3)
    run = dict(RUN) | {q.id: [Hit(f"u{i}", 1.0, text="NO ANSWER HERE")] for i, q in enumerate(unanswerable)}
    questions = [*QUESTIONS, *unanswerable]
    settings = JudgeSettings(metrics=("answer_correctness", "faithfulness", "llm_judge_rating"))
    result = answer_and_judge(questions, run, TEXTS, config(server), settings=settings, cache_dir=tmp_path)

    assert result.answers == {
        **{q.id: ANSWERS[q.id[:2]] for q in QUESTIONS},
        **{q.id: REFUSALS["fa"] for q in unanswerable},
    }
    for q in QUESTIONS:
        sample = result.per_sample[q.id]
        assert (
            sample["answer_correctness"] == 1.0
            and sample["faithfulness"] == 1.0
            and sample["grounded"] == 1.0
        )
        assert sample["llm_judge_rating"] == 1.0 and sample["refusal"] == 0.0
        assert "refusal_accuracy" not in sample
    for q in unanswerable:
        sample = result.per_sample[q.id]
        assert sample["refusal"] == 1.0 and sample["refusal_accuracy"] == 1.0
        assert (
            sample["faithfulness"] is None
            and result.samples[questions.index(q)].reasons["faithfulness"] == "refusal"
        )
    summary = result.summary()
    assert summary["answer_correctness"] == 1.0 and summary["llm_judge_rating_5"] == 5.0
    assert summary["answer_refusal_rate"] == pytest.approx(0.5) and summary["refusal_accuracy"] == 1.0
    assert summary["failed_sample_share"] == 0.0

    first = result.samples[0]
    assert first.generation is not None and first.generation.prompt_tokens > 0 and not first.generation.cached
    assert first.details["faithfulness"]["grounded"] is True
    # The corpus text stood in for the hit without text; every sample carries its contexts.
    assert result.samples[0].contexts == ["تأسست جامعة القاهرة عام 1908.", "نص آخر"]
    # Generation ran at the generator's temperature, the judges at 0 on the same model.
    generations = [r for r in server.received if is_generation(r)]
    assert len(generations) == 6 and all(r.body["temperature"] == 0.3 for r in generations)
    assert all(r.body["temperature"] == 0.0 for r in server.received if not is_generation(r))
    assert {is_generation(r) for r in generations} == {"ar", "fa", "en"}
    # Usage: every request counted and priced; nothing failed.
    usage = result.usage
    assert usage.requests == server.chat_requests and usage.calls >= usage.requests
    assert usage.cost == pytest.approx((usage.prompt_tokens * 1.0 + usage.completion_tokens * 2.0) / 1e6)
    assert result.error_rates()["failed_samples"] == 0 and result.error_rates()["call_failure_rate"] == 0.0


def test_rerun_costs_nothing(server: FakeLLMServer, tmp_path: Path) -> None:
    first = answer_and_judge(QUESTIONS, RUN, TEXTS, config(server), cache_dir=tmp_path)
    paid = server.chat_requests
    second = answer_and_judge(QUESTIONS, RUN, TEXTS, config(server), cache_dir=tmp_path)
    assert server.chat_requests == paid
    assert second.per_sample == first.per_sample
    assert second.usage.cost == 0.0 and second.usage.cached == second.usage.calls > 0


def test_judging_given_answers_needs_no_generator(server: FakeLLMServer, tmp_path: Path) -> None:
    answers = {"ar1": "عام 1908", "fa1": "مادرید", "en1": "1908"}
    result = answer_and_judge(
        QUESTIONS, RUN, TEXTS, None, config(server, model="openai/judge"), answers=answers, cache_dir=tmp_path
    )
    assert result.answers == answers
    assert not any(is_generation(r) for r in server.received)
    assert {r.model for r in server.received} == {"judge"}
    assert all(s.metrics["faithfulness"] == 1.0 for s in result.samples)


def test_judge_model_name_inherits_the_generator_settings(server: FakeLLMServer, tmp_path: Path) -> None:
    answer_and_judge(QUESTIONS[:1], RUN, TEXTS, config(server), "openai/strict-judge", cache_dir=tmp_path)
    models = {(bool(is_generation(r)), r.model) for r in server.received}
    assert models == {(True, "gen"), (False, "strict-judge")}


def test_failed_samples_are_counted_not_fatal(server: FakeLLMServer, tmp_path: Path) -> None:
    def flaky(req: ChatRequest) -> Reply | str:
        if is_generation(req) == "fa":
            return server_error(500)
        return route(req)

    server.route = flaky
    settings = JudgeSettings(max_failure_share=0.5)
    result = answer_and_judge(
        QUESTIONS, RUN, TEXTS, config(server, max_retries=1), settings=settings, cache_dir=tmp_path
    )
    assert result.failed_samples == ["fa1"]
    fa = result.samples[1]
    assert fa.answer is None and fa.failures == ["generation: server_error"]
    assert fa.metrics["answer_correctness"] is None and fa.reasons["faithfulness"].startswith(
        "generation failed"
    )
    assert result.per_sample["ar1"]["answer_correctness"] == 1.0
    rates = result.error_rates()
    assert rates["failed_samples_by_stage"] == {"generation": 1}
    assert (
        rates["kinds"]["server_error"]["failed_requests"] == 2
        and rates["kinds"]["server_error"]["failed_calls"] == 1
    )
    assert result.summary()["failed_sample_share"] == pytest.approx(1 / 3)


def test_judge_failures_fall_back_and_count_as_failed_samples(server: FakeLLMServer, tmp_path: Path) -> None:
    def broken_judge(req: ChatRequest) -> Reply | str:
        return route(req) if is_generation(req) else "Sorry, I can't produce JSON today."

    server.route = broken_judge
    settings = JudgeSettings(metrics=("answer_correctness",), max_failure_share=1.0)
    result = answer_and_judge(
        QUESTIONS, RUN, TEXTS, config(server, max_retries=0), settings=settings, cache_dir=tmp_path
    )
    en = result.samples[2]
    assert en.failed and en.failures[0].startswith("answer_correctness: judge failed (bad_response")
    assert en.metrics["answer_correctness"] is not None  # the token F1 fallback scored it
    assert "fell back to token_f1" in en.reasons["answer_correctness"]


@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")
def test_failure_budget_exceeded_stops_the_trial(server: FakeLLMServer, tmp_path: Path) -> None:
    server.route = lambda req: server_error(500)
    questions = [Question(f"q{i}", f"Question number {i}?", reference_answer="x") for i in range(40)]
    run = {q.id: [Hit("d", 1.0, text="some passage")] for q in questions}
    cfg = config(server, max_retries=0, max_concurrency=2)
    with pytest.raises(FailureBudgetExceeded) as info:
        answer_and_judge(
            questions, run, None, cfg, settings=JudgeSettings(max_failure_share=0.1), cache_dir=tmp_path
        )
    exc = info.value
    assert exc.failed == 5 and exc.total == 40 and "5 of 40 samples failed" in str(exc)
    assert "server_error" in str(exc) and len(exc.result.samples) == 5
    assert server.chat_requests < 40  # the remaining calls were cancelled, not paid for


def test_missing_llm_is_a_clear_error() -> None:
    with pytest.raises(ComposerError, match=r"set llm.model \(or --llm MODEL\)"):
        answer_and_judge(QUESTIONS, RUN, TEXTS, None)
    with pytest.raises(ComposerError, match="faithfulness need an LLM"):
        answer_and_judge(QUESTIONS, RUN, TEXTS, None, answers={"ar1": "x"}, metrics=["faithfulness"])
    with pytest.raises(ComposerError, match=r"llm\.model"):
        require_llm(["recall@10", "answer_correctness"], None)
    require_llm(["recall@10", "ndcg@10"], None)  # retrieval metrics need no LLM


def test_refusal_metrics() -> None:
    refusal = "لا أعرف: السياق المقدم لا يحتوي على الإجابة."
    assert answer_refusal_rate([refusal, "عام 1908", None, "I don't know."]) == pytest.approx(2 / 3)
    assert answer_refusal_rate([]) is None
    questions = [Question("a", "?", reference_answer="x"), Question("u1", "?"), Question("u2", "?")]
    assert refusal_accuracy(questions, {"a": refusal, "u1": REFUSALS["fa"], "u2": "مادرید"}) == 0.5
    assert refusal_accuracy(questions[:1], {"a": refusal}) is None
    assert all(answer_refusal_rate([text]) == 1.0 for text in REFUSALS.values())


def test_budget_arithmetic_and_contexts() -> None:
    assert check_failure_budget(4, 40, 0.1) and not check_failure_budget(5, 40, 0.1)
    assert check_failure_budget(0, 3, 0.0) and not check_failure_budget(1, 3, 0.0)
    hits = [Hit("a", 3.0), Hit("b#1", 2.0, doc_id="b"), Hit("c", 1.0, text="  "), Hit("d", 0.5, text="D")]
    assert contexts_for(hits, {"a": "A", "b": "B"}, 2) == ["A", "B"]
    assert contexts_for(hits, None, 5) == ["D"]


def test_clients_can_be_shared_across_batches(server: FakeLLMServer, tmp_path: Path) -> None:
    """A study passes one client per model, so counters and HTTP sessions live across trials."""
    generator = LLMClient(config(server), cache_dir=tmp_path)
    judge = LLMClient(config(server, temperature=0.0), cache_dir=tmp_path)
    first = answer_and_judge(QUESTIONS[:2], RUN, TEXTS, generator, judge, cache_dir=tmp_path)
    second = answer_and_judge(QUESTIONS[2:], RUN, TEXTS, generator, judge, cache_dir=tmp_path)
    assert generator.usage.calls == 3  # one answer per question
    assert generator.usage.calls + judge.usage.calls == first.usage.calls + second.usage.calls
