"""The pipeline's LLM stages through litellm against the local fake server: answers (generator vs the
extractive answerer), multi-query and step-back expansion fused by RRF, HyDE on the dense branch only, the
LLM reranker."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fake_llm_server import ChatRequest, FakeLLMServer, Reply, server_error
from scripted_llm import ScriptedRAG, kind_of, step_back

from composer.data import Corpus, Hit, Question, load_corpus, load_questions
from composer.llm import LLMConfig
from composer.pipeline.pipeline import Pipeline
from composer.retrieval.prompts import STEP_BACK

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arcd-sample"
N_QUESTIONS = 6


@pytest.fixture(scope="module")
def data() -> tuple[Corpus, list[Question]]:
    corpus = load_corpus(EXAMPLE / "corpus.jsonl")
    questions = load_questions(EXAMPLE / "questions.jsonl", corpus=corpus).questions[:N_QUESTIONS]
    return corpus, list(questions)


@pytest.fixture()
def fake_llm_golds(data: tuple[Corpus, list[Question]]) -> dict[str, str]:
    return {q.question: q.gold_answers[0] for q in data[1]}


def make(server: FakeLLMServer, workdir: Path, corpus: Corpus, **sections: Any) -> Pipeline:
    """An indexed pipeline answering with openai/fake on the server (fast retries for the fault tests)."""
    config: dict[str, Any] = {"retrieval": {"mode": "bm25", "k": 5}, **sections}
    config.setdefault("generation", {}).setdefault("model", "openai/fake")
    config["generation"]["api_base"] = server.url
    run = LLMConfig(model="openai/fake", timeout=5, backoff_base=0.01, backoff_max=0.02, max_retries=1)
    pipeline = Pipeline.from_config(config, workdir=workdir, llm=run)
    pipeline.index(corpus)
    return pipeline


def rrf(lists: list[list[Hit]], k: int) -> list[tuple[str, float]]:
    """Reciprocal rank fusion by hand: Σ 1/(k + position), position 0-based (Qdrant's), ties by id
    descending (trec_eval's)."""
    scores: dict[str, float] = {}
    for hits in lists:
        for position, hit in enumerate(hits):
            scores[hit.id] = scores.get(hit.id, 0.0) + 1.0 / (k + position)
    return sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)


def route(server: FakeLLMServer) -> ScriptedRAG:
    assert isinstance(server.route, ScriptedRAG)
    return server.route


def test_answers_come_from_the_generator_when_a_model_is_set(
    fake_llm: FakeLLMServer, tmp_path: Path, data: tuple[Corpus, list[Question]]
) -> None:
    corpus, questions = data
    llm = make(fake_llm, tmp_path, corpus, retrieval={"mode": "bm25", "k": 8},
               generation={"model": "openai/fake", "temperature": 0.7, "max_contexts": 3})
    ranking, _ = llm.rank(questions)
    run = ranking.to_hit_lists()
    answers = llm.answer(questions, ranking)
    assert [answers[q.id].text for q in questions] == [f"{q.gold_answers[0]} بحسب السياق" for q in questions]
    assert all(a.result is not None and a.result.prompt_tokens > 0 for a in answers.values())
    assert {a.lang for a in answers.values()} == {"ar"}
    generations = [r for r in fake_llm.received if kind_of(r) == "generate"]
    assert len(generations) == N_QUESTIONS and all(r.body["temperature"] == 0.7 for r in generations)
    # The prompt holds the top generation.max_contexts passages of the 8 retrieved, numbered.
    assert all("\n[3] " in r.prompt and "\n[4] " not in r.prompt for r in generations)

    offline = Pipeline.from_config({"retrieval": {"mode": "bm25", "k": 5}}, workdir=tmp_path)
    offline.index(corpus)
    extractive = offline.answer(questions, ranking)
    assert all(a.result is None and a.text for a in extractive.values())
    for q in questions:  # a sentence of one of the top generation.max_contexts (5) hits
        assert any((extractive[q.id].text or "-") in (h.text or "") for h in run[q.id][:5])
    assert fake_llm.chat_requests == N_QUESTIONS  # the extractive answerer made no call


def test_a_failed_generation_is_an_answer_without_text(
    fake_llm: FakeLLMServer, tmp_path: Path, data: tuple[Corpus, list[Question]]
) -> None:
    corpus, questions = data
    scripted = route(fake_llm)
    fake_llm.route = lambda req: server_error(500) if questions[0].question in req.prompt else scripted(req)
    pipeline = make(fake_llm, tmp_path, corpus)
    answers = pipeline.answer(questions, pipeline.rank(questions)[0])
    broken = answers[questions[0].id]
    assert broken.failed and broken.result is not None and broken.result.error_kind == "server_error"
    assert broken.result.attempts == 2  # max_retries=1
    assert all(not answers[q.id].failed for q in questions[1:])


def test_multi_query_searches_every_paraphrase_and_fuses_them_by_rrf(
    fake_llm: FakeLLMServer, tmp_path: Path, data: tuple[Corpus, list[Question]]
) -> None:
    corpus, questions = data
    expanded = make(fake_llm, tmp_path, corpus, query_expansion={"method": "multi_query", "n": 2},
                    generation={"model": "openai/fake", "temperature": 0.9})
    ranking, latency = expanded.rank(questions)
    run = ranking.to_hit_lists()
    assert route(fake_llm).count("multi_query") == N_QUESTIONS
    assert all(r.body["temperature"] == 0.0 for r in fake_llm.received)  # expansion is cache-friendly
    assert (latency["expand"] > 0).all()

    plain = make(fake_llm, tmp_path, corpus)
    for q in questions:
        queries = [q.question, f"ما {q.question}", f"{q.question} في النص"]
        lists = plain.retrieve([Question(id=str(i), question=t) for i, t in enumerate(queries)])
        expected = rrf([lists[str(i)] for i in range(3)], k=60)[:5]
        assert [h.id for h in run[q.id]] == [hit_id for hit_id, _ in expected]
        assert [h.score for h in run[q.id]] == pytest.approx([score for _, score in expected])

    # A rerun of the same expansion is served from the LLM cache.
    before = fake_llm.chat_requests
    again = make(fake_llm, tmp_path, corpus, query_expansion={"method": "multi_query", "n": 2})
    assert again.retrieve(questions) == run and fake_llm.chat_requests == before


def test_hyde_searches_dense_with_the_passage_and_leaves_bm25_alone(
    fake_llm: FakeLLMServer, tmp_path: Path, data: tuple[Corpus, list[Question]]
) -> None:
    corpus, questions = data
    small = Corpus(corpus.documents[:20], source="arcd-sample[:20]")
    asked = [q for q in questions if all(r in small for r in q.relevant_ids)][:3]
    assert asked
    bm25 = make(fake_llm, tmp_path, small, query_expansion={"method": "hyde"})
    plain_bm25 = make(fake_llm, tmp_path, small)
    assert bm25.retrieve(asked) == plain_bm25.retrieve(asked)
    assert route(fake_llm).count("hyde") == 0  # HyDE never touches BM25: no call paid for nothing

    dense = make(fake_llm, tmp_path, small, retrieval={"mode": "dense", "k": 5},
                 query_expansion={"method": "hyde"})
    run = dense.retrieve(asked)
    assert route(fake_llm).count("hyde") == len(asked)
    for q in asked:
        passage = f"تذكر الموسوعة أن الجواب هو {q.gold_answers[0]}. وهذا معروف في المصادر."
        question_vec = dense.embedder.encode_queries([q.question])[0]
        mean = (question_vec + dense.embedder.encode_passages([passage])[0]) / 2
        found = dense.workspace.backend.search_dense(dense.key, (mean / np.linalg.norm(mean))[None, :], 5)[0]
        assert [h.id for h in run[q.id]] == [dense.handle.table.ids[dense.handle.points[p]] for p, _ in found]


def test_llm_reranker_reorders_the_top_n(
    fake_llm: FakeLLMServer, tmp_path: Path, data: tuple[Corpus, list[Question]]
) -> None:
    corpus, questions = data
    retrieval = {"mode": "bm25", "k": 5, "prefetch": 10}
    plain = make(fake_llm, tmp_path, corpus, retrieval={**retrieval, "k": 10}).retrieve(questions)
    listwise = make(fake_llm, tmp_path, corpus, retrieval=retrieval,
                    rerank={"method": "llm", "mode": "listwise", "top_n": 3})
    run = listwise.retrieve(questions)
    assert route(fake_llm).count("rerank") == N_QUESTIONS  # one ranking call per question
    for q in questions:
        ids = [h.id for h in plain[q.id]]
        assert [h.id for h in run[q.id]] == [*ids[:3][::-1], *ids[3:5]]

    pointwise = make(fake_llm, tmp_path, corpus, retrieval=retrieval,
                     rerank={"method": "llm", "mode": "pointwise", "top_n": 3})
    graded = pointwise.retrieve(questions)
    assert route(fake_llm).count("rerank") == N_QUESTIONS * 4  # one grade per passage
    assert all([h.id for h in graded[q.id]] == [h.id for h in plain[q.id][:5]] for q in questions)  # ties


def test_a_rerank_model_of_its_own_needs_no_generator(
    fake_llm: FakeLLMServer, tmp_path: Path, data: tuple[Corpus, list[Question]]
) -> None:
    corpus, questions = data
    pipeline = Pipeline.from_config(
        {"retrieval": {"mode": "bm25", "k": 3}, "rerank": {"method": "llm", "model": "openai/ranker"}},
        workdir=tmp_path, llm=LLMConfig(model="openai/fake", api_base=fake_llm.url, timeout=5),
    )
    pipeline.index(corpus)
    assert pipeline.generator is None
    ranking, _ = pipeline.rank(questions[:2])
    assert {r.model for r in fake_llm.received} == {"ranker"} and len(ranking) == 2
    answers = pipeline.answer(questions[:2], ranking)
    assert all(a.result is None for a in answers.values())  # still extractive


def test_faults_on_expansion_fall_back_to_the_question(
    fake_llm: FakeLLMServer, tmp_path: Path, data: tuple[Corpus, list[Question]]
) -> None:
    corpus, questions = data
    scripted = route(fake_llm)

    def no_expansion(req: ChatRequest) -> Reply | str:
        return server_error(503) if kind_of(req) == "multi_query" else scripted(req)

    fake_llm.route = no_expansion
    expanded = make(fake_llm, tmp_path, corpus, query_expansion={"method": "multi_query"})
    plain = make(fake_llm, tmp_path, corpus)
    run = expanded.retrieve(questions)
    assert {q: [h.id for h in hits] for q, hits in run.items()} == {
        q: [h.id for h in hits] for q, hits in plain.retrieve(questions).items()
    }


def test_step_back_searches_the_general_question_too_and_fuses_by_rrf(
    fake_llm: FakeLLMServer, tmp_path: Path, data: tuple[Corpus, list[Question]]
) -> None:
    corpus, questions = data
    expanded = make(fake_llm, tmp_path, corpus, query_expansion={"method": "step_back"})
    run = expanded.retrieve(questions)
    assert route(fake_llm).count("step_back") == N_QUESTIONS
    asked = [r for r in fake_llm.received if kind_of(r) == "step_back"]
    assert all(r.system == STEP_BACK["ar"].system and r.body["temperature"] == 0.0 for r in asked)

    plain = make(fake_llm, tmp_path, corpus)
    for q in questions:
        lists = plain.retrieve([Question("q", q.question), Question("g", step_back(q.question))])
        expected = rrf([lists["q"], lists["g"]], k=60)[:5]
        assert [h.id for h in run[q.id]] == [hit_id for hit_id, _ in expected]
        assert [h.score for h in run[q.id]] == pytest.approx([score for _, score in expected])

    # Memoized in the workspace: the same expansion again asks nothing, not even the LLM cache's server.
    before = fake_llm.chat_requests
    assert make(fake_llm, tmp_path, corpus,
                query_expansion={"method": "step_back"}).retrieve(questions) == run
    assert fake_llm.chat_requests == before


@pytest.mark.parametrize(
    ("question", "lang"),
    [("پایتخت ایران کجاست؟", "fa"), ("Where is the capital of Iran?", "en"), ("أين تقع عاصمة إيران؟", "ar")],
)
def test_step_back_asks_in_the_questions_language(
    fake_llm: FakeLLMServer, tmp_path: Path, data: tuple[Corpus, list[Question]], question: str, lang: str
) -> None:
    expanded = make(fake_llm, tmp_path, data[0], query_expansion={"method": "step_back"})
    expanded.retrieve([Question("q", question)])
    (request,) = [r for r in fake_llm.received if kind_of(r) == "step_back"]
    assert request.system == STEP_BACK[lang].system
    assert question in request.prompt


def test_a_failed_step_back_falls_back_to_the_question(
    fake_llm: FakeLLMServer, tmp_path: Path, data: tuple[Corpus, list[Question]]
) -> None:
    corpus, questions = data
    scripted = route(fake_llm)
    fake_llm.route = lambda req: server_error(503) if kind_of(req) == "step_back" else scripted(req)
    expanded = make(fake_llm, tmp_path, corpus, query_expansion={"method": "step_back"})
    plain = make(fake_llm, tmp_path, corpus)
    run = expanded.retrieve(questions)
    assert {q: [h.id for h in hits] for q, hits in run.items()} == {
        q: [h.id for h in hits] for q, hits in plain.retrieve(questions).items()
    }
    # A reply that is not the JSON asked for is a failure too (and is not cached as a success).
    chatty = "Sure! Here is a broader question."
    fake_llm.route = lambda req: chatty if kind_of(req) == "step_back" else scripted(req)
    garbled = make(fake_llm, tmp_path / "garbled", corpus, query_expansion={"method": "step_back"})
    assert {q: [h.id for h in hits] for q, hits in garbled.retrieve(questions).items()} == {
        q: [h.id for h in hits] for q, hits in run.items()
    }
