"""The shapes Composer accepts from a user, as types for a type checker: what ``composer.evaluate`` scores,
what ``composer.optimize``'s factory returns, what a question set or corpus may be given as.

They describe, never decide: ``composer.evaluation.system.retrieve_method`` asks an object for its
``retrieve`` or ``invoke`` method, or calls it, by duck typing, so a class need not name these protocols to
be accepted; a type checker holds a call to their terms. Importing this module imports nothing heavy.

Example:
    A RAG system a type checker accepts wherever a ``System`` is expected::

        class MyRag:
            def retrieve(self, question: str) -> list[dict[str, object]]:
                return [{"id": "d1", "text": "...", "score": 1.0}]

            def answer(self, question: str, contexts: list[str]) -> str:
                return contexts[0] if contexts else ""

        def make_rag(settings: dict[str, object]) -> MyRag:  # a SystemFactory
            return MyRag()
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, Union

if TYPE_CHECKING:
    from composer.data.types import Corpus, QuestionSet
    from composer.pipeline.config import PipelineConfig
    from composer.pipeline.pipeline import Pipeline

Items: TypeAlias = Iterable[Any]
"""What a retriever returns for a question, in rank order: ids (str or int), dicts with ``id`` (or
``doc_id``/``chunk_id``), ``text`` and ``score``, LangChain Documents, LlamaIndex NodeWithScores, or
``composer.Hit``s (see ``composer.evaluation.system``)."""


class Retriever(Protocol):
    """A user's retriever: ``retrieve(question)`` returns the items found, best first; sync or
    ``async def``. A LlamaIndex retriever is one.

    A conversational one takes the history too: ``retrieve(question, history)``, or a parameter named
    ``history`` or ``chat_history`` (``ConversationalRetriever``): Composer reads that from the signature.

    Example:
        A retriever over a fixed list, scored with ``composer.evaluate``::

            class Fixed:
                def retrieve(self, question: str) -> list[str]:
                    return ["doc-1", "doc-2"]

            composer.evaluate(Fixed(), "examples/arcd-sample/questions.jsonl",
                              "examples/arcd-sample/corpus.jsonl")
    """

    def retrieve(self, question: str, /) -> Items | Awaitable[Items]:
        """The items found for ``question``, best first.

        Args:
            question: The question's text.

        Returns:
            ``Items`` (or an awaitable of them, from an ``async def``); an empty list when nothing is found.
        """
        ...


class RAGSystem(Retriever, Protocol):
    """A retriever that also answers: ``answer(question, contexts)`` gets the texts its own ``retrieve``
    returned for the question, in that order, and returns the answer LLM judges and answer metrics score.

    Example:
        Answered and judged by ``composer.evaluate(MyRag(), questions, corpus, judge="openai/gpt-4o-mini")``::

            class MyRag:
                def retrieve(self, question: str) -> list[dict[str, str]]:
                    return [{"id": "d1", "text": "Paris is the capital of France."}]

                async def answer(self, question: str, contexts: list[str]) -> str:
                    return contexts[0]
    """

    def answer(self, question: str, contexts: list[str], /) -> str | Awaitable[str | None] | None:
        """The answer to ``question`` from ``contexts``.

        Args:
            question: The question's text.
            contexts: The texts of the items ``retrieve`` returned for it (those that have a text).

        Returns:
            The answer (None counts as an empty answer), or an awaitable of it.
        """
        ...


class Runnable(Protocol):
    """A LangChain retriever or runnable: ``invoke(question)`` returns the items (Documents) found.

    Example:
        A LangChain vector store's retriever::

            composer.evaluate(store.as_retriever(search_kwargs={"k": 10}), questions, corpus)
    """

    def invoke(self, question: str, /) -> Items | Awaitable[Items]:
        """The items found for ``question``, best first.

        Args:
            question: The question's text.

        Returns:
            ``Items`` (or an awaitable of them).
        """
        ...


History: TypeAlias = list[dict[str, str]]
"""A question's earlier turns as a conversational system gets them, oldest first: ``{"role": "user" |
"assistant", "content": text}`` dicts (OpenAI's and LangChain's shape); ``[]`` for a first turn."""


class ConversationalRetriever(Protocol):
    """A retriever that reads the conversation: ``retrieve(question, history)`` gets each question's
    ``History``, so a follow-up such as "and when did he die?" can be searched with the turns it leans on.
    Composer tells it from a ``Retriever`` by its signature: a second positional parameter without a
    default, or one named ``history`` or ``chat_history`` (given by keyword); its ``answer``, if any, may
    take the history the same way, after ``contexts``. A LangChain runnable whose input schema declares
    ``input`` and ``chat_history`` (``create_history_aware_retriever``'s) is called with
    ``invoke({"input": question, "chat_history": history})`` as it is. A system that takes no history is
    scored on follow-ups all the same, with one warning saying how many it answered without their
    conversation.

    Example:
        Scored on a conversational question set by ``composer.evaluate(MyChat(), questions, corpus)``::

            class MyChat:
                def retrieve(self, question: str, history: list[dict[str, str]]) -> list[str]:
                    said = " ".join(t["content"] for t in history if t["role"] == "user")
                    return my_search(f"{question} {said}")
    """

    def retrieve(self, question: str, history: History, /) -> Items | Awaitable[Items]:
        """The items found for ``question`` in its conversation, best first.

        Args:
            question: The question's text.
            history: Its earlier turns, oldest first (``History``).

        Returns:
            ``Items`` (or an awaitable of them).
        """
        ...


RetrieveFunction: TypeAlias = Callable[[str], Items | Awaitable[Items]] | Callable[
    [str, History], Items | Awaitable[Items]
]
"""A plain function (sync or ``async def``) ``question -> items``, or ``(question, history) -> items``."""

System: TypeAlias = Retriever | ConversationalRetriever | RAGSystem | Runnable | RetrieveFunction
"""A user's system, anything ``composer.evaluate`` scores besides Composer's own pipelines and rankings."""

SystemFactory: TypeAlias = Callable[[dict[str, Any]], System]
"""``factory(settings) -> system``: ``composer.optimize`` calls it with each trial's sampled settings."""

Retrieved: TypeAlias = Mapping[str, Iterable[Any]]
"""A finished ranking: question id -> the items retrieved for it, best first (``Items``)."""


class Table(Protocol):
    """A pandas DataFrame, as Composer reads one (``to_dict(orient="records")``), without importing pandas."""

    def to_dict(self, orient: Any = ..., /) -> Any:
        """The table's rows (``orient="records"``: one dict per row)."""
        ...


Records: TypeAlias = str | Path | Table | Iterable[Mapping[str, Any]]
"""Rows as a file (.jsonl, .json, .csv, .tsv, .xlsx, .parquet), a DataFrame or a list of dicts."""

Questions: TypeAlias = Union["QuestionSet", Records]
"""A question set: a ``QuestionSet`` or its ``Records``."""

CorpusSource: TypeAlias = Union["Corpus", Records]
"""A corpus: a ``Corpus``, its ``Records``, or a document file or folder of them (a path)."""

Evaluable: TypeAlias = Union[System, "Pipeline", "PipelineConfig", str, Path, Mapping[str, Any]]
"""What ``composer.evaluate`` scores: a ``System``, a ``Pipeline``, a pipeline config (YAML path, dict,
``PipelineConfig``) or a ranking (a ranking file's path, or a ``Retrieved`` mapping)."""

Split: TypeAlias = Literal["all", "selection", "held_out"]
"""Which of a study's questions to score (``composer.evaluate(split=...)``, ``eval --split``): all, the
selection questions its trials were scored on, or those it held out (the split an export records)."""
