"""A user's own conversational system: `composer.evaluate` and `composer.optimize` give each question's
history (`{role, content}` dicts) to a `retrieve`/`answer`/callable whose signature takes it, and to a
LangChain runnable taking `{"input", "chat_history"}`; a system that takes none is warned of once, with how
many follow-ups it answered without their conversation."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

import composer
from composer.data import load_corpus, load_questions
from composer.data.types import Corpus, QuestionSet
from composer.evaluation.system import SystemPipeline, history_parameter

DOCS = [
    {"id": "khashoggi", "text": "جمال خاشقجي صحفي سعودي. توفي خاشقجي في إسطنبول عام 2018."},
    {"id": "shawqi", "text": "توفي الشاعر أحمد شوقي عام 1932 في القاهرة."},
]
FIRST, FOLLOW_UP = "من هو جمال خاشقجي؟", "ومتى توفي؟"
ROWS = [
    {"id": "c1#1", "question": FIRST, "relevant_ids": ["khashoggi"], "conversation_id": "c1", "turn": 1},
    {"id": "c1#2", "question": FOLLOW_UP, "relevant_ids": ["khashoggi"], "conversation_id": "c1", "turn": 2,
     "history": [{"role": "user", "text": FIRST}, {"role": "assistant", "text": "صحفي سعودي."}]},
]
HISTORY = [{"role": "user", "content": FIRST}, {"role": "assistant", "content": "صحفي سعودي."}]


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return load_corpus(DOCS)


@pytest.fixture(scope="module")
def questions(corpus: Corpus) -> QuestionSet:
    return load_questions(ROWS, corpus=corpus)


def found(question: str, history: list[dict[str, str]]) -> list[str]:
    """What a conversational system finds: the journalist when the conversation names him."""
    said = question + " ".join(t["content"] for t in history)
    return ["khashoggi", "shawqi"] if "خاشقجي" in said else ["shawqi", "khashoggi"]


class Positional:
    def __init__(self) -> None:
        self.seen: list[tuple[str, list[dict[str, str]]]] = []

    def retrieve(self, question: str, history: list[dict[str, str]]) -> list[str]:
        self.seen.append((question, history))
        return found(question, history)

    def answer(self, question: str, contexts: list[str], history: list[dict[str, str]]) -> str:
        return f"{len(history)} earlier turns"


class KeywordOnly:
    async def retrieve(self, question: str, *, chat_history: list[dict[str, str]]) -> list[str]:
        return found(question, chat_history)


class Alone:
    def retrieve(self, question: str, k: int = 5) -> list[str]:
        return found(question, [])[:k]


def conversation(question: str, history: list[dict[str, str]]) -> list[str]:
    return found(question, history)


def recall(report: composer.EvaluationReport) -> list[float]:
    return [float(r.metrics["recall@1"] or 0.0) for r in report.samples]


@pytest.mark.parametrize("system", [Positional(), KeywordOnly(), conversation], ids=["positional", "keyword",
                                                                                      "callable"])
def test_a_system_taking_history_gets_each_questions_conversation(
    system: Any, questions: QuestionSet, corpus: Corpus, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        report = composer.evaluate(system, questions, corpus, k=(1,), workdir=tmp_path)
    assert recall(report) == [1.0, 1.0]  # the follow-up found its passage through its history
    assert "takes no history" not in caplog.text
    if isinstance(system, Positional):
        assert sorted(system.seen) == [(FIRST, []), (FOLLOW_UP, HISTORY)]  # {role, content}, oldest first


def test_answer_gets_the_history_too(questions: QuestionSet, corpus: Corpus) -> None:
    producer = SystemPipeline(Positional(), corpus=corpus)
    ranking, _ = producer.rank(list(questions))
    answers = producer.answer(list(questions), ranking)
    assert [answers[q.id].text for q in questions] == ["0 earlier turns", "2 earlier turns"]


def test_a_system_without_history_is_warned_of_once_with_its_follow_ups(
    questions: QuestionSet, corpus: Corpus, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        report = composer.evaluate(Alone(), questions, corpus, k=(1,), workdir=tmp_path)
    assert recall(report) == [1.0, 0.0]  # k kept its default: the second parameter is not the history
    warned = [r.getMessage() for r in caplog.records if "takes no history" in r.getMessage()]
    assert warned == ["Alone takes no history: 1 follow-ups are searched and answered without their "
                      "conversation; give its retrieve a history parameter (see 'Your own system')"]


def test_history_is_read_from_the_signature() -> None:
    def two(question: str, turns: list[Any]) -> list[str]: ...
    def named(question: str, k: int = 3, chat_history: list[Any] | None = None) -> list[str]: ...
    def defaulted(question: str, k: int = 3) -> list[str]: ...
    def answer(question: str, contexts: list[str]) -> str: ...

    assert history_parameter(two) == 1 and history_parameter(named) == "chat_history"  # by keyword
    assert history_parameter(defaulted) is None and history_parameter(answer, after=2) is None
    assert history_parameter(len) is None  # a builtin: the question alone


def test_a_langchain_runnable_taking_input_and_chat_history_works_as_it_is(
    questions: QuestionSet, corpus: Corpus, tmp_path: Path
) -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
    from langchain_core.runnables import RunnableLambda

    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("chat_history"), ("user", "{input}")])

    def search(value: Any) -> list[Document]:
        return [Document(page_content="", metadata={"id": i}) for i in found(value.to_string(), [])]

    chain = prompt | RunnableLambda(search)  # a history-aware retriever's shape
    report = composer.evaluate(chain, questions, corpus, k=(1,), workdir=tmp_path)
    assert recall(report) == [1.0, 1.0]
    plain = RunnableLambda(lambda question: [Document(page_content="", metadata={"id": "shawqi"})])
    assert not SystemPipeline(plain, corpus=corpus).takes_history  # declares no keys: the question alone


@pytest.mark.slow  # a study: its MLflow writer takes most of its 15 s
def test_optimize_gives_a_factorys_system_the_history(
    questions: QuestionSet, corpus: Corpus, tmp_path: Path
) -> None:
    systems = {"with": Positional, "without": Alone}
    result = composer.optimize(
        lambda settings: systems[settings["history"]](),
        space={"dimensions": {"history": {"choices": ["with", "without"]}}},
        questions=questions, corpus=corpus, workdir=tmp_path, name="history",
        objective={"metrics": {"recall": 1.0}, "k": 1}, sampler={"name": "grid"}, n_trials=2,
    )
    assert result.best_params == {"history": "with"} and result.best_value == pytest.approx(1.0)
