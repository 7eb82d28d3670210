"""Each LLM judge with scripted replies in Arabic, Persian and English; fallbacks, blends, refusals."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from string import Template
from typing import Any, TypeVar

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import numpy as np
import pytest
from fake_llm_server import ChatRequest, FakeLLMServer, Reply, fake_embedding, server_error

from composer.data.types import Question
from composer.errors import ConfigError
from composer.judges import (
    AnswerCorrectnessJudge,
    AnswerRelevancyJudge,
    ContextPrecisionJudge,
    ContextRecallJudge,
    CorrectnessWeights,
    FaithfulnessJudge,
    JudgeSettings,
    RatingJudge,
    average_precision,
    make_judges,
    normalize_rating,
    rating_out_of_5,
    statement_f1,
)
from composer.judges import prompts as judge_prompts
from composer.llm import LLMClient, LLMConfig, run_sync
from composer.llm.prompt import Localized
from composer.metrics.scorers import AnswerScorer, OverlapFaithfulnessScorer, TokenF1Scorer

T = TypeVar("T")

KINDS: dict[str, Localized] = {
    "statements": judge_prompts.STATEMENTS,
    "faithfulness": judge_prompts.FAITHFULNESS,
    "correctness": judge_prompts.CORRECTNESS,
    "rating": judge_prompts.RATING,
    "relevancy": judge_prompts.RELEVANCY,
    "precision": judge_prompts.CONTEXT_PRECISION,
    "recall": judge_prompts.CONTEXT_RECALL,
}


def prompt_kind(req: ChatRequest) -> tuple[str, str]:
    """Which judge prompt, in which language, the request carries."""
    for kind, localized in KINDS.items():
        for lang, template in localized.items():
            if req.system == Template(template.system).safe_substitute(n="3"):
                return kind, lang
    raise AssertionError(f"unknown prompt: {req.system[:80]}")


Script = dict[str, str | Callable[[ChatRequest], str]]


def scripted(script: Script) -> Callable[[ChatRequest], Reply | str]:
    def route(req: ChatRequest) -> Reply | str:
        kind, _ = prompt_kind(req)
        reply = script[kind]
        return reply(req) if callable(reply) else reply

    return route


def embed(texts: Sequence[str]) -> np.ndarray:
    return np.array([fake_embedding(t) for t in texts])


def cosine(a: str, b: str) -> float:
    va, vb = embed([a, b])
    return float(np.clip(va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb)), 0.0, 1.0))


@pytest.fixture()
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as srv:
        yield srv


def client_for(server: FakeLLMServer, tmp_path: Path, **overrides: object) -> LLMClient:
    settings: dict[str, object] = {
        "model": "openai/judge",
        "api_base": server.url,
        "timeout": 5.0,
        "backoff_base": 0.01,
        "backoff_max": 0.05,
        "max_retries": 1,
        **overrides,
    }
    return LLMClient(LLMConfig.model_validate(settings), cache_dir=tmp_path)


CASES = {
    "ar": Question(
        "ar1",
        "متى تأسست جامعة القاهرة؟",
        reference_answer="تأسست جامعة القاهرة عام 1908",
        answers=("1908",),
    ),
    "fa": Question("fa1", "پایتخت اسپانیا کجاست؟", reference_answer="مادرید"),
    "en": Question("en1", "When was Cairo University founded?", reference_answer="It was founded in 1908."),
}
CONTEXTS = {
    "ar": ["تأسست جامعة القاهرة عام 1908 باسم الجامعة المصرية.", "تقع الجامعة في الجيزة."],
    "fa": ["مادرید پایتخت و بزرگ‌ترین شهر اسپانیا است.", "بارسلونا دومین شهر بزرگ اسپانیا است."],
    "en": ["Cairo University was founded in 1908 as the Egyptian University.", "It is located in Giza."],
}
LONG_ANSWERS = {
    "ar": "تأسست جامعة القاهرة عام 1908. وكان اسمها الجامعة المصرية. ويبلغ عدد طلابها مليون طالب",
    "fa": "مادرید پایتخت اسپانیا است. این شهر بزرگ‌ترین شهر کشور است. جمعیت آن ده میلیون نفر است؟",
    "en": (
        "Cairo University was founded in 1908. It was called the Egyptian University. "
        "It has a million students"
    ),
}


@pytest.mark.parametrize("lang", ["ar", "fa", "en"])
def test_faithfulness_in_each_language(server: FakeLLMServer, tmp_path: Path, lang: str) -> None:
    claims = ["claim one", "claim two", "claim three"]
    server.route = scripted(
        {
            "statements": '{"statements": ["claim one", "claim two", "claim three"]}',
            "faithfulness": '```json\n{"verdicts": [1, 1, 0], "reason": "the third is unsupported"}\n```',
        }
    )
    judge = FaithfulnessJudge(client_for(server, tmp_path))
    verdict = judge.score(CASES[lang], LONG_ANSWERS[lang], CONTEXTS[lang], None)
    assert verdict.score == pytest.approx(2 / 3)
    assert "2/3 claims supported" in verdict.reason and "claim three" in verdict.reason
    kinds = [prompt_kind(r) for r in server.received]
    assert kinds == [("statements", lang), ("faithfulness", lang)]
    # Every sentence reaches the extractor, also the last one without a final stop (or ending in ؟).
    assert server.received[0].prompt.count("\n3. ") == 1
    assert CONTEXTS[lang][1] in server.received[1].prompt
    assert all(f"{i}. {c}" in server.received[1].prompt for i, c in enumerate(claims, 1))
    assert all(r.body["temperature"] == 0.0 for r in server.received)


def test_faithfulness_grounded_verdict_and_short_answers(server: FakeLLMServer, tmp_path: Path) -> None:
    server.route = scripted({"faithfulness": '{"verdicts": [1]}'})
    judge = FaithfulnessJudge(client_for(server, tmp_path))
    verdict = run(judge.ajudge(CASES["ar"], "عام 1908", CONTEXTS["ar"]))
    assert verdict.score.score == 1.0 and verdict.details["grounded"] is True and not verdict.failed
    # A short one-sentence answer is its own claim: one call, no extraction.
    assert [prompt_kind(r)[0] for r in server.received] == ["faithfulness"]
    assert "1. عام 1908" in server.received[0].prompt


def run(coro: Coroutine[Any, Any, T]) -> T:
    return run_sync(coro)


@pytest.mark.parametrize("lang", ["ar", "fa", "en"])
def test_answer_correctness_blends_statement_f1_and_similarity(
    server: FakeLLMServer, tmp_path: Path, lang: str
) -> None:
    def statements(req: ChatRequest) -> str:
        if "reference" in req.prompt:
            return '{"statements": ["r1", "r2"]}'
        return '{"statements": ["s1", "s2", "s3"]}'

    server.route = scripted(
        {"statements": statements, "correctness": '{"answer": [1, 1, 0], "reference": [1, 0]}'}
    )
    question = CASES[lang]
    reference = "The reference has one sentence. And a second one"
    judge = AnswerCorrectnessJudge(client_for(server, tmp_path), embed=embed)
    verdict = run(judge.ajudge(question, LONG_ANSWERS[lang], CONTEXTS[lang], reference))
    f1 = statement_f1(2, 1, 1)
    assert f1 == pytest.approx(2 / 3)
    expected = 0.75 * f1 + 0.25 * cosine(reference, LONG_ANSWERS[lang])
    assert verdict.score.score == pytest.approx(expected)
    assert verdict.details["tp"] == 2 and verdict.details["fp"] == 1 and verdict.details["fn"] == 1
    assert "TP 2, FP 1, FN 1" in verdict.score.reason
    kinds = sorted(prompt_kind(r) for r in server.received)
    assert kinds == sorted([("statements", lang), ("statements", lang), ("correctness", lang)])


def test_answer_correctness_weights_and_missing_embedder(server: FakeLLMServer, tmp_path: Path) -> None:
    server.route = scripted({"correctness": '{"answer": [1], "reference": [1]}'})
    client = client_for(server, tmp_path)
    question = CASES["fa"]
    only_f1 = AnswerCorrectnessJudge(
        client, embed=embed, weights=CorrectnessWeights(statements=1, similarity=0)
    )
    assert only_f1.score(question, "مادرید", [], None).score == 1.0
    no_embed = AnswerCorrectnessJudge(client)
    score = no_embed.score(question, "مادرید", [], None)
    assert score.score == 1.0 and "no embedding function" in score.reason
    half = AnswerCorrectnessJudge(client, embed=embed, weights=CorrectnessWeights(statements=1, similarity=1))
    assert half.score(question, "مادرید", [], None).score == pytest.approx(
        0.5 + 0.5 * cosine("مادرید", "مادرید")
    )
    with pytest.raises(ValueError):
        CorrectnessWeights(statements=0, similarity=0)


def test_answer_correctness_without_reference_or_with_wrong_answer(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    server.route = scripted({"correctness": '{"answer": [0], "reference": [0]}'})
    judge = AnswerCorrectnessJudge(client_for(server, tmp_path))
    no_ref = Question("q", "ما هذا؟")
    assert judge.score(no_ref, "شيء", [], None).reason == "no reference answer"
    assert judge.score(CASES["fa"], "بارسلونا", [], None).score == 0.0


@pytest.mark.parametrize(
    ("reply", "rating"), [('{"rating": ٤, "reason": "جيد"}', 4.0), ('{"rating": 9}', 5.0)]
)
def test_rating_is_normalized_and_clamped(
    server: FakeLLMServer, tmp_path: Path, reply: str, rating: float
) -> None:
    server.route = scripted({"rating": reply})
    judge = RatingJudge(client_for(server, tmp_path))
    verdict = run(judge.ajudge(CASES["ar"], "عام 1908", CONTEXTS["ar"]))
    assert verdict.details["rating"] == rating
    assert verdict.score.score == pytest.approx(normalize_rating(rating))
    assert verdict.score.reason.startswith(f"rated {rating:.1f}/5")
    assert rating_out_of_5(normalize_rating(rating)) == pytest.approx(rating)
    # Both gold answers reach the judge.
    assert "تأسست جامعة القاهرة عام 1908 / 1908" in server.received[0].prompt


def test_answer_relevancy(server: FakeLLMServer, tmp_path: Path) -> None:
    question = CASES["en"]
    generated = ["When was Cairo University founded?", "In which year was Cairo University established?"]
    server.route = scripted({"relevancy": json.dumps({"questions": generated, "noncommittal": 0})})
    judge = AnswerRelevancyJudge(client_for(server, tmp_path), embed=embed, n=3)
    score = judge.score(question, "It was founded in 1908.", [], None)
    expected = (cosine(question.question, generated[0]) + cosine(question.question, generated[1])) / 2
    assert score.score == pytest.approx(expected) and score.score == pytest.approx(
        (1.0 + cosine(question.question, generated[1])) / 2
    )
    server.route = scripted({"relevancy": '{"questions": ["What?"], "noncommittal": 1}'})
    assert judge.score(question, "It depends on many things.", [], None).score == 0.0


def test_context_precision_and_recall(server: FakeLLMServer, tmp_path: Path) -> None:
    contexts = ["passage a", "مادرید پایتخت اسپانیا است.", "passage c"]
    question = Question(
        "fa2", "پایتخت اسپانیا کجاست؟", reference_answer="پایتخت اسپانیا مادرید است. جمعیت آن زیاد است"
    )
    server.route = scripted(
        {"precision": '{"verdicts": [0, 1, 1]}', "recall": '{"verdicts": ["بله", "خیر"]}'}
    )
    client = client_for(server, tmp_path)
    precision = ContextPrecisionJudge(client).score(question, "مادرید", contexts, None)
    assert precision.score == pytest.approx((1 / 2 + 2 / 3) / 2)
    recall = ContextRecallJudge(client).score(question, "مادرید", contexts, None)
    assert recall.score == 0.5 and "1/2 reference sentences" in recall.reason
    recall_prompt = next(r for r in server.received if prompt_kind(r) == ("recall", "fa")).prompt
    assert "2. جمعیت آن زیاد است" in recall_prompt  # the unpunctuated last sentence is judged too
    assert average_precision([0, 0]) == 0.0 and average_precision([1, 0, 1]) == pytest.approx((1 + 2 / 3) / 2)


def test_context_precision_without_reference_uses_the_answer(server: FakeLLMServer, tmp_path: Path) -> None:
    server.route = scripted({"precision": '{"verdicts": [1]}'})
    score = ContextPrecisionJudge(client_for(server, tmp_path)).score(
        Question("u", "سؤال بلا إجابة مرجعية؟"), "إجابة مولدة", ["مقطع"], None
    )
    assert score.score == 1.0 and "answer (no reference)" in score.reason
    assert "إجابة مولدة" in server.received[0].prompt


def test_fallback_when_the_judge_fails_says_so(server: FakeLLMServer, tmp_path: Path) -> None:
    server.route = lambda req: server_error(500)
    client = client_for(server, tmp_path, max_retries=1)
    judge = FaithfulnessJudge(client, fallback=OverlapFaithfulnessScorer())
    verdict = run(judge.ajudge(CASES["ar"], "تأسست الجامعة عام 1908", CONTEXTS["ar"]))
    assert verdict.failed
    assert (
        verdict.score.score
        == OverlapFaithfulnessScorer()
        .score(CASES["ar"], "تأسست الجامعة عام 1908", CONTEXTS["ar"], None)
        .score
    )
    assert verdict.score.reason.startswith("judge failed (server_error")
    assert "fell back to faithfulness_overlap" in verdict.score.reason
    assert client.usage.failed_calls["server_error"] == 1 and server.chat_requests == 2
    bare = FaithfulnessJudge(client).score(CASES["en"], "Founded in 1908.", CONTEXTS["en"], None)
    assert bare.score is None and bare.reason.startswith("judge failed (server_error")


def test_unparseable_judge_replies_fall_back(server: FakeLLMServer, tmp_path: Path) -> None:
    server.route = lambda req: "I think the answer is quite good overall."
    client = client_for(server, tmp_path, max_retries=2)
    judge = RatingJudge(client, fallback=TokenF1Scorer())
    score = judge.score(CASES["fa"], "مادرید", [], None)
    assert score.score == 1.0  # token F1 of "مادرید" against "مادرید"
    assert "judge failed (bad_response" in score.reason and "fell back to token_f1" in score.reason
    # Asked once more with a repair instruction, not max_retries times identically.
    assert server.chat_requests == 2 and client.usage.failed_attempts["bad_response"] == 2
    assert client.cache is not None and len(client.cache) == 0  # nothing unusable was cached


def test_blend_with_the_deterministic_scorer(server: FakeLLMServer, tmp_path: Path) -> None:
    server.route = scripted({"rating": '{"rating": 3}'})
    judge = RatingJudge(client_for(server, tmp_path), fallback=TokenF1Scorer(), blend=0.4)
    score = judge.score(CASES["fa"], "مادرید", [], None)
    assert score.score == pytest.approx(0.6 * 0.5 + 0.4 * 1.0)
    assert "x token_f1 1.00" in score.reason and "rated 3.0/5" in score.reason
    with pytest.raises(ConfigError):
        RatingJudge(client_for(server, tmp_path), blend=0.5)


def test_refusals_and_empty_answers_are_not_graded(server: FakeLLMServer, tmp_path: Path) -> None:
    """A refusal is no hallucination; of an answerable question it is no answer either: 0, no call."""
    client = client_for(server, tmp_path)
    refusal = "لا أعرف: السياق المقدم لا يحتوي على الإجابة."
    for judge in (FaithfulnessJudge(client), RatingJudge(client), AnswerCorrectnessJudge(client)):
        score = judge.score(CASES["ar"], refusal, CONTEXTS["ar"], None)
        if judge.name == "faithfulness":
            assert (score.score, score.reason) == (None, "refusal")
        else:
            assert (score.score, score.reason) == (0.0, "refusal of an answerable question")
        assert judge.score(CASES["fa"], "   ", CONTEXTS["fa"], None).score is None
    assert server.chat_requests == 0


def test_make_judges_and_settings(server: FakeLLMServer, tmp_path: Path) -> None:
    client = client_for(server, tmp_path)
    scorers: list[AnswerScorer] = [FaithfulnessJudge(client), RatingJudge(client)]  # mypy checks the protocol
    assert [s.name for s in scorers] == ["faithfulness", "llm_judge_rating"]
    settings = JudgeSettings(metrics=("faithfulness", "answer_correctness", "context_recall"), blend=0.2)
    judges = make_judges(client, settings, embed)
    assert list(judges) == ["faithfulness", "answer_correctness", "context_recall"]
    assert isinstance(judges["faithfulness"].fallback, OverlapFaithfulnessScorer)
    assert judges["answer_correctness"].blend == 0.2
    with pytest.raises(ConfigError, match="answer_relevancy needs an embedding function"):
        make_judges(client, JudgeSettings(metrics=("answer_relevancy",)))
    with pytest.raises(ValueError, match="unknown judge metric"):
        JudgeSettings(metrics=("bleu",))
