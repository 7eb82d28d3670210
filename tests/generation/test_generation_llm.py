"""The LLM generator, query expansion and the LLM reranker against the fake server."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest
from fake_llm_server import ChatRequest, FakeLLMServer, Reply, server_error

from composer.data.types import Hit, Question
from composer.errors import ConfigError
from composer.generation import ANSWER_TEMPLATES, REFUSALS, Generator, answer_questions
from composer.llm import LLMClient, LLMConfig
from composer.llm.prompt import PromptLanguage, prompt_language
from composer.metrics import is_refusal
from composer.retrieval.expansion import QueryExpander
from composer.retrieval.llm_rerank import LLMReranker, RerankMode
from composer.retrieval.prompts import HYDE, MULTI_QUERY, RERANK_LISTWISE, RERANK_POINTWISE

QUESTIONS = {
    "ar": "ما هي عاصمة مصر؟",
    "fa": "پایتخت اسپانیا کجاست؟",
    "en": "What is the capital of Egypt?",
}


@pytest.fixture()
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(lambda req: "القاهرة") as srv:
        yield srv


def client_for(server: FakeLLMServer, tmp_path: Path, **overrides: object) -> LLMClient:
    settings: dict[str, object] = {
        "model": "openai/gen",
        "api_base": server.url,
        "timeout": 5.0,
        "max_retries": 0,
        **overrides,
    }
    return LLMClient(LLMConfig.model_validate(settings), cache_dir=tmp_path)


@pytest.mark.parametrize("lang", ["ar", "fa", "en"])
@pytest.mark.parametrize("template", ["grounded", "concise"])
def test_prompt_follows_the_question_language(
    server: FakeLLMServer, tmp_path: Path, lang: PromptLanguage, template: str
) -> None:
    generator = Generator(client_for(server, tmp_path), template)
    messages = generator.messages(QUESTIONS[lang], ["first passage\nwith a line break", "second passage"])
    system, user = messages[0]["content"], messages[1]["content"]
    assert system == ANSWER_TEMPLATES[template][lang].system
    assert REFUSALS[lang] in system  # the exact refusal sentence the model is told to give
    assert "[1] first passage with a line break\n[2] second passage" in user
    assert user.rstrip().endswith(ANSWER_TEMPLATES[template][lang].user.rsplit("\n", 1)[-1])
    assert QUESTIONS[lang] in user


def test_refusal_sentences_are_recognized() -> None:
    for lang, text in REFUSALS.items():
        assert is_refusal(text), lang
        assert prompt_language(text) == lang


def test_prompt_language_detection() -> None:
    assert [prompt_language(QUESTIONS[lang]) for lang in ("ar", "fa", "en")] == ["ar", "fa", "en"]
    assert prompt_language("12345 ?") == "en"


def test_generator_answers_a_batch(server: FakeLLMServer, tmp_path: Path) -> None:
    generator = Generator(client_for(server, tmp_path, temperature=0.8), "concise")
    questions = [Question(f"q{i}", QUESTIONS[lang]) for i, lang in enumerate(("ar", "fa", "en"))]
    counted: list[int] = []
    answers = answer_questions(questions, [["القاهرة عاصمة مصر.", "b"], [], ["  "]], generator,
                               on_answer=counted.append)
    first = answers["q0"]
    assert first.text == "القاهرة" and first.lang == "ar" and not first.failed
    assert first.contexts == ("القاهرة عاصمة مصر.", "b")  # what the judges will grade it against
    # No passage: the refusal in the question's language, without paying for a call.
    assert (answers["q1"].text, answers["q1"].result) == (REFUSALS["fa"], None)
    assert (answers["q2"].text, answers["q2"].lang) == (REFUSALS["en"], "en")
    assert server.chat_requests == 1 and sum(counted) == 3
    request = server.received[0]
    assert request.body["temperature"] == 0.8
    assert "[2] b" in request.prompt and "[3]" not in request.prompt


def test_generator_failure_is_an_answer_without_text(server: FakeLLMServer, tmp_path: Path) -> None:
    server.route = lambda req: server_error(503)
    generator = Generator(client_for(server, tmp_path))
    question = Question("q", QUESTIONS["en"])
    answers = answer_questions([question], [["Cairo is the capital of Egypt."]], generator)
    answer = answers["q"]
    assert answer.failed and answer.result is not None and answer.result.error_kind == "server_error"


def test_unknown_template_is_a_config_error(server: FakeLLMServer, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown prompt template 'chatty'"):
        Generator(client_for(server, tmp_path), "chatty")


def test_multi_query_expansion(server: FakeLLMServer, tmp_path: Path) -> None:
    paraphrases = ["عاصمة مصر ما هي؟", "ما اسم عاصمة جمهورية مصر؟", "أين تقع عاصمة مصر؟", "extra"]
    server.route = lambda req: json.dumps({"queries": paraphrases}, ensure_ascii=False)
    expander = QueryExpander(client_for(server, tmp_path), "multi_query", n=3)
    (expansion,) = expander.expand_many([QUESTIONS["ar"]])
    assert expansion.queries == (QUESTIONS["ar"], *paraphrases[:3]) and not expansion.failed
    assert server.received[0].system == MULTI_QUERY["ar"].messages(question="", n="3")[0]["content"]


def test_hyde_expansion_and_failures(server: FakeLLMServer, tmp_path: Path) -> None:
    server.route = lambda req: "مادرید پایتخت اسپانیا است."
    expander = QueryExpander(client_for(server, tmp_path), "hyde")
    (expansion,) = expander.expand_many([QUESTIONS["fa"]])
    assert expansion.queries == (QUESTIONS["fa"],) and expansion.passages == ("مادرید پایتخت اسپانیا است.",)
    assert server.received[0].system == HYDE["fa"].system
    server.route = lambda req: server_error(500)
    (failed,) = QueryExpander(client_for(server, tmp_path), "hyde").expand_many([QUESTIONS["en"]])
    assert failed.failed and failed.queries == (QUESTIONS["en"],) and failed.passages == ()
    none = QueryExpander(None).expand_many([QUESTIONS["en"]])
    assert none[0].queries == (QUESTIONS["en"],)
    with pytest.raises(ConfigError, match="needs an LLM"):
        QueryExpander(None, "multi_query")


def test_expansions_are_memoized_across_expanders(server: FakeLLMServer, tmp_path: Path) -> None:
    """A study's trials share one expansion per (model, method, n, question); failures are retried."""
    server.route = lambda req: json.dumps({"queries": ["a", "b"]})
    memo: dict[object, object] = {}
    first = QueryExpander(client_for(server, tmp_path, cache=False), "multi_query", n=2, memo=memo)
    second = QueryExpander(client_for(server, tmp_path, cache=False), "multi_query", n=2, memo=memo)
    assert first.expand_many([QUESTIONS["en"]]) == second.expand_many([QUESTIONS["en"], QUESTIONS["en"]])[:1]
    assert server.chat_requests == 1
    QueryExpander(client_for(server, tmp_path, cache=False), "multi_query", n=3, memo=memo).expand_many(
        [QUESTIONS["en"]])
    assert server.chat_requests == 2  # another n is another expansion


HITS = [Hit(f"d{i}", 10.0 - i, text=f"passage number {i}") for i in range(1, 5)] + [Hit("bare", 1.0)]


def test_listwise_reranker(server: FakeLLMServer, tmp_path: Path) -> None:
    server.route = lambda req: 'Ranking:\n```json\n{"ranking": [3, 1]}\n```'
    reranker = LLMReranker(client_for(server, tmp_path), "listwise", top_n=3)
    reranked = reranker.rerank(QUESTIONS["en"], HITS)
    assert [h.id for h in reranked] == ["d3", "d1", "d2", "d4", "bare"]
    assert [h.score for h in reranked] == sorted((h.score for h in reranked), reverse=True)
    assert server.chat_requests == 1
    assert server.received[0].system == RERANK_LISTWISE["en"].system
    assert (
        "[3] passage number 3" in server.received[0].prompt
        and "passage number 4" not in server.received[0].prompt
    )


def test_pointwise_reranker(server: FakeLLMServer, tmp_path: Path) -> None:
    grades = {"passage number 1": "0", "passage number 2": '{"score": 3}', "passage number 3": "Score: ٢"}

    def grade(req: ChatRequest) -> str:
        return next(v for k, v in grades.items() if k in req.prompt)

    server.route = grade
    reranker = LLMReranker(client_for(server, tmp_path), "pointwise", top_n=3)
    (reranked,) = reranker.rerank_many([(QUESTIONS["fa"], HITS)])
    assert [h.id for h in reranked] == ["d2", "d3", "d1", "d4", "bare"]
    assert server.chat_requests == 3 and server.received[0].system == RERANK_POINTWISE["fa"].system


def test_reranker_keeps_the_order_when_the_llm_fails(server: FakeLLMServer, tmp_path: Path) -> None:
    server.route = lambda req: Reply(status=500, raw_body=b'{"error": {"message": "boom"}}')
    client = client_for(server, tmp_path)
    modes: tuple[RerankMode, ...] = ("listwise", "pointwise")
    for mode in modes:
        assert LLMReranker(client, mode).rerank(QUESTIONS["en"], HITS) == HITS
    assert client.usage.failed_calls["server_error"] == 5  # one listwise call, four pointwise calls
    with pytest.raises(ConfigError):
        LLMReranker(client, "sideways")  # type: ignore[arg-type]
