"""A user's own RAG system as something Composer can score: the "produce a batch" side of a trial.

Composer's ``Pipeline`` ranks and answers a batch of questions; ``SystemPipeline`` does the same for any
object with ``retrieve(question) -> list`` (a user's own class, a LlamaIndex retriever; optionally with
``answer(question, contexts) -> str``), sync or ``async def``, for one with ``invoke(question) -> list``
(a LangChain retriever or runnable), or for a plain callable ``question -> list``. Both go through the
one scoring path, ``composer.evaluation.scoring.score_pipeline``: the same metrics, judges, failure budget
and reports.

A conversational system gets each question's history, its earlier turns oldest first as ``{role,
content}`` dicts (``[]`` for a first turn): ``retrieve``/``answer``/the callable when its signature takes
it (``history_parameter``), a LangChain runnable as ``invoke({"input", "chat_history"})`` when its input
schema declares both keys. A system that takes none, scored on follow-ups, gets one warning saying how
many it answered without their conversation.

Retrieved items are read by shape, without importing any framework: ids (str or int); mappings with
``id``/``doc_id``/``chunk_id``, ``text``/``page_content``/``content`` and ``score``; LangChain
``Document``s (``page_content``, ``metadata`` id/doc_id/source and score, ``id``); LlamaIndex
``NodeWithScore``s (``node`` with ``get_content()``, ``node_id`` and ``ref_doc_id``, ``score``); and any
object with those attributes. No framework is imported: they are told apart by their methods. A
``retrieve`` that raises on a question is a failed sample (counted against the failure budget, the run
goes on); one that returns something unreadable is a bug in the system, reported with the question it was
asked.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import numbers
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from composer.data.fields import normal_id
from composer.data.ranking import Ranking, ranking_from_hits
from composer.data.types import Corpus, Hit, HitLists, Question, QuestionSet, StageError
from composer.errors import ComposerError
from composer.evaluation.given import hits_table
from composer.generation import Answer
from composer.llm.prompt import prompt_language
from composer.llm.sync import run_sync
from composer.metrics.matching import Universe

ID_KEYS = ("id", "chunk_id", "doc_id", "node_id", "id_")
TEXT_KEYS = ("text", "page_content", "content")
METADATA_ID_KEYS = ("id", "chunk_id", "doc_id", "source", "document_id", "ref_doc_id")
METADATA_SCORE_KEYS = ("score", "relevance_score", "similarity_score")
RETRIEVE_METHODS = ("retrieve", "invoke")
"""How a system is asked for a question's items, in order: ``retrieve`` (a user's own class, a LlamaIndex
retriever), ``invoke`` (a LangChain retriever or any runnable)."""
ACCEPTED = (
    "an object with retrieve(question) -> list (your own class, a LlamaIndex retriever; optionally "
    "answer(question, contexts) -> str), an object with invoke(question) -> list of Documents (a LangChain "
    "retriever or runnable), or a callable question -> list"
)


HISTORY_NAMES = ("history", "chat_history")
"""Parameter names that take a question's history, wherever they stand in the signature."""
CHAT_KEYS = frozenset({"input", "chat_history"})
"""The input keys of a LangChain conversational runnable (``create_history_aware_retriever``'s)."""
logger = logging.getLogger(__name__)


class SystemError_(ComposerError):
    """A user's system returned something Composer cannot read: names the question and what came back."""


class NotASystem(ComposerError):
    """An object Composer cannot ask for retrieved items: says what it accepts."""


def retrieve_method(obj: object) -> Callable[..., Any] | None:
    """What asks ``obj`` for a question's items: its ``retrieve`` or ``invoke`` (``RETRIEVE_METHODS``),
    the object itself when it is a plain callable, else None."""
    for name in RETRIEVE_METHODS:
        method = getattr(obj, name, None)
        if callable(method):
            return method
    if callable(obj) and not isinstance(obj, type):
        return obj
    return None


def history_parameter(fn: Callable[..., Any], after: int = 1) -> str | int | None:
    """How ``fn`` takes a question's history, read from its signature: the name of a parameter called
    ``history`` or ``chat_history`` (passed by keyword), else ``after`` when the positional parameter
    following its ``after`` usual ones (``retrieve(question, history)``: 1; ``answer(question, contexts,
    history)``: 2) has no default (passed there), else None: it takes none (a default-valued parameter
    there, such as ``k``, is not the history)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: the question alone
        return None
    named = next((p for p in params if p.name in HISTORY_NAMES), None)
    if named is not None:
        return named.name
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    free = len(positional) > after and positional[after].default is inspect.Parameter.empty
    return after if free else None


def chat_runnable(obj: object) -> bool:
    """Whether ``obj`` is a LangChain runnable taking ``{"input", "chat_history"}``, by the keys its input
    schema declares (a runnable that declares none is given the question alone)."""
    try:
        schema = obj.input_schema.model_json_schema()  # type: ignore[attr-defined]
    except Exception:  # no schema, or one pydantic cannot build: nothing declared
        return False
    return isinstance(schema, Mapping) and set(schema.get("properties") or ()) >= CHAT_KEYS


def messages(question: Question) -> list[dict[str, str]]:
    """A question's history as a system gets it: ``{role, content}`` dicts, oldest first."""
    return [{"role": t.role, "content": t.text} for t in question.history]


def is_system(obj: object) -> bool:
    """Whether ``obj`` is a user's system (see ``retrieve_method``)."""
    return retrieve_method(obj) is not None


def not_a_system(obj: object, what: str = "evaluate", *, also: str | None = None) -> NotASystem:
    """The error for an object that is no system: what it is, what is accepted (``also`` first: what the
    caller takes besides systems), and for a LangChain vector store (it has ``as_retriever``) the way in."""
    store = callable(getattr(obj, "as_retriever", None))
    hint = "; for a vector store, pass its .as_retriever()" if store else ""
    given = f"{also}, {ACCEPTED}" if also else ACCEPTED
    return NotASystem(f"cannot {what} a {type(obj).__name__}: give {given}{hint}")


def as_hit(item: Any, rank: int, question: str) -> Hit:
    """One retrieved item as a Hit, by shape (see the module docstring). ``rank`` is its 0-based place in
    the list, for the error message."""
    if isinstance(item, Hit):
        return item
    if isinstance(item, str | int) and not isinstance(item, bool):
        return Hit(normal_id(str(item)), math.nan)
    node = getattr(item, "node", None)
    if node is not None and not isinstance(item, Mapping):  # LlamaIndex NodeWithScore
        hit = as_hit(node, rank, question)
        score = _score(getattr(item, "score", None), rank, question)
        return Hit(hit.id, score, hit.text, hit.doc_id)
    fields: Mapping[str, Any] = item if isinstance(item, Mapping) else _attributes(item)
    metadata = fields.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    item_id = next((fields[k] for k in ID_KEYS if fields.get(k) not in (None, "")), None)
    given = fields.get("score")
    if given is None:  # a LangChain Document keeps a retriever's score in its metadata
        given = next((float(metadata[k]) for k in METADATA_SCORE_KEYS if _finite_real(metadata.get(k))), None)
    if item_id is None:
        item_id = next((metadata[k] for k in METADATA_ID_KEYS if metadata.get(k) not in (None, "")), None)
    if item_id is None:
        keys = sorted(fields) if isinstance(item, Mapping) else type(item).__name__
        raise SystemError_(
            f"retrieve({question!r}) returned an item without an id at rank {rank + 1} ({keys}); give "
            "each item an 'id' (or 'doc_id'/'chunk_id', or metadata['id'] for a LangChain Document)"
        )
    text = next((fields[k] for k in TEXT_KEYS if isinstance(fields.get(k), str)), None)
    if text is None and callable(getattr(item, "get_content", None)):  # a LlamaIndex node
        content = item.get_content()
        text = content if isinstance(content, str) else None
    doc_id = fields.get("doc_id") or metadata.get("doc_id") or fields.get("ref_doc_id")
    if doc_id is not None and str(doc_id) == str(item_id):
        doc_id = None
    return Hit(
        normal_id(str(item_id)),
        _score(given, rank, question),
        text,
        normal_id(str(doc_id)) if doc_id is not None else None,
    )


def _attributes(item: Any) -> dict[str, Any]:
    names = (*ID_KEYS, *TEXT_KEYS, "score", "metadata", "ref_doc_id")
    return {name: getattr(item, name) for name in names if getattr(item, name, None) is not None}


def _finite_real(value: object) -> bool:
    """Whether a metadata value is a score: metadata is the user's own (``"score": "4/5 stars"``), so one
    that is no finite real number (numpy's included, bools not) is no score rather than an error."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _score(value: Any, rank: int, question: str) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SystemError_(
            f"retrieve({question!r}) returned a score that is not a finite number at rank {rank + 1}: "
            f"{value!r}"
        )
    return float(value)


def as_hits(returned: Any, question: str) -> list[Hit]:
    """A retrieve() result as hits in the order given; a list with unscored items gets descending
    stand-in scores (n, n-1, ... 1) in that order, so that reports and fusion always have numbers."""
    if isinstance(returned, str | bytes | Mapping) or not isinstance(returned, Iterable):
        raise SystemError_(
            f"retrieve({question!r}) returned {type(returned).__name__}, expected a list of ids, dicts, "
            "documents or nodes"
        )
    hits = [as_hit(item, rank, question) for rank, item in enumerate(returned)]
    if any(math.isnan(h.score) for h in hits):
        n = len(hits)
        hits = [Hit(h.id, float(n - i), h.text, h.doc_id) for i, h in enumerate(hits)]
    return hits


class _Call:
    """One of the system's methods, called sync or async alike, ``concurrency`` at a time."""

    def __init__(self, fn: Callable[..., Any], concurrency: int) -> None:
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004 - an object whose __call__ is async
        )
        self.limit = asyncio.Semaphore(concurrency)
        self.concurrency = concurrency

    async def __call__(self, *args: Any, **kwargs: Any) -> tuple[Any, float]:
        """(the result, seconds it took); exceptions propagate."""
        async with self.limit:
            started = time.perf_counter()
            if self.is_async:
                result = await self.fn(*args, **kwargs)
            elif self.concurrency == 1:
                result = self.fn(*args, **kwargs)
            else:
                result = await asyncio.to_thread(self.fn, *args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
            return result, time.perf_counter() - started


class SystemPipeline:
    """A user's system in the shape scoring asks of a pipeline (``RankingPipeline``).

    ``concurrency`` questions are in flight at once (sync methods run in threads; 1 calls them one by
    one). The system keeps its own index: ``index`` only records the corpus.
    """

    generator_model: str | None = None

    def __init__(
        self, system: Any, *, corpus: Corpus | None = None, concurrency: int = 8, name: str | None = None
    ) -> None:
        retrieve = retrieve_method(system)
        if retrieve is None:
            raise not_a_system(system, "score")
        if concurrency < 1:
            raise ComposerError(f"concurrency must be at least 1, got {concurrency}")
        self.system = system
        self.name = name or type(system).__name__
        self.corpus = corpus
        self._retrieve = _Call(retrieve, concurrency)
        answer = getattr(system, "answer", None) if retrieve is not system else None
        self._answer = _Call(answer, concurrency) if callable(answer) else None
        invoked = retrieve == getattr(system, "invoke", None)  # a runnable: its input schema says
        self._retrieve_history: str | int | None = (
            ("chat" if chat_runnable(system) else None) if invoked else history_parameter(retrieve))
        self._answer_history = history_parameter(answer, after=2) if callable(answer) else None
        self.searched = 0.0
        self.failed: dict[str, StageError] = {}
        """Questions whose retrieval raised in the last ``rank`` call: failed samples, not fatal."""

    @property
    def takes_history(self) -> bool:
        """Whether the system is given each question's history (see the module)."""
        return self._retrieve_history is not None

    def warn_unheard(self, questions: QuestionSet) -> None:
        """One warning when the system takes no history and ``questions`` has follow-ups: how many it
        answers without their conversation."""
        unheard = sum(q.is_follow_up for q in questions)
        if unheard and not self.takes_history:
            logger.warning(
                "%s takes no history: %d follow-ups are searched and answered without their conversation; "
                "give its retrieve a history parameter (see 'Your own system')", self.name, unheard)

    @property
    def can_answer(self) -> bool:
        return self._answer is not None

    def batched(self, answering: bool) -> bool:
        """Always: every batch costs the system real calls, so a pruner may stop a trial early."""
        return True

    @property
    def answerer(self) -> str:
        return f"system:{self.name}" if self._answer is not None else "none"

    def index(self, corpus: Corpus) -> None:
        """Nothing to build: the system searches its own collection; ``corpus`` supplies hit texts."""
        self.corpus = corpus

    def universe(self) -> Universe | None:
        """Unknown: the system searches its own collection. Answer matching judges the retrieved items."""
        return None

    def rank(self, questions: Sequence[Question]) -> tuple[Ranking, dict[str, np.ndarray]]:
        """Each question's items in the system's order, and its retrieve latency."""
        items = list(questions)
        results = run_sync(self._gather([_ask(q, (q.question,), self._retrieve_history) for q in items],
                                        self._retrieve))
        hits: HitLists = {}
        seconds = np.zeros(len(items))
        self.failed = {}
        for row, (q, (returned, took, error)) in enumerate(zip(items, results, strict=True)):
            seconds[row] = took
            if error is not None:
                self.failed[q.id] = StageError("retrieval", type(error).__name__, str(error)[:500])
                hits[q.id] = []
                continue
            if returned is None:
                raise SystemError_(
                    f"retrieve({q.question!r}) (question '{q.id}') returned None; expected "
                    "a list (an empty list when nothing is found)"
                )
            hits[q.id] = as_hits(returned, q.question)
        self.searched += float(seconds.sum())
        # A live system's ranking is the order it returns (what its own generator reads), ties and all.
        ranking = ranking_from_hits(hits, [q.id for q in items], hits_table(hits, self.corpus), order="given")
        return ranking, {"retrieve": seconds}

    def answer(
        self,
        questions: Iterable[Question],
        ranking: Ranking,
        *,
        max_failures: int | None = None,
        on_answer: Callable[[int], None] | None = None,
    ) -> dict[str, Answer]:
        """Question id -> the system's answer from the texts it retrieved; a raising ``answer`` is a failed
        sample (text None), one that returns a non-string a bug reported with its question."""
        assert self._answer is not None, "scoring asks for answers only of a system that can answer"
        items = list(questions)
        rows = {qid: row for row, qid in enumerate(ranking.question_ids)}
        contexts = [[h.text for h in ranking.hits(rows[q.id]) if h.text] for q in items]
        results = run_sync(self._gather(
            [_ask(q, (q.question, c), self._answer_history) for q, c in zip(items, contexts, strict=True)],
            self._answer))
        out: dict[str, Answer] = {}
        for q, given, (text, took, error) in zip(items, contexts, results, strict=True):
            lang = prompt_language(q.question)
            if error is not None:
                from composer.llm.client import Result

                failure = Result(None, "other", f"{type(error).__name__}: {error}"[:500], latency=took)
                out[q.id] = Answer(None, lang, failure, tuple(given))
                continue
            if text is not None and not isinstance(text, str):
                raise SystemError_(
                    f"answer({q.question!r}) (question '{q.id}') returned "
                    f"{type(text).__name__}, expected a string"
                )
            out[q.id] = Answer(text or "", lang, None, tuple(given))
        if on_answer is not None and out:
            on_answer(len(out))
        return out

    @staticmethod
    async def _gather(
        calls: Sequence[Call], method: Callable[..., Awaitable[tuple[Any, float]]]
    ) -> list[tuple[Any, float, BaseException | None]]:
        async def one(call: Call) -> tuple[Any, float, BaseException | None]:
            args, kwargs = call
            started = time.perf_counter()
            try:
                result, took = await method(*args, **kwargs)
            except Exception as exc:  # the system's own failure: a failed sample
                return None, time.perf_counter() - started, exc
            return result, took, None

        return list(await asyncio.gather(*(one(args) for args in calls)))


Call = tuple[tuple[Any, ...], dict[str, Any]]
"""A method's positional and keyword arguments for one question."""


def _ask(q: Question, args: tuple[Any, ...], how: str | int | None) -> Call:
    """The arguments that ask a system about ``q``: ``args`` alone, its history after them (a position),
    by keyword (a parameter's name), or as a LangChain chat input (``"chat"``)."""
    if how is None:
        return args, {}
    if how == "chat":
        return ({"input": q.question, "chat_history": messages(q)},), {}
    if isinstance(how, int):
        return (*args, messages(q)), {}
    return args, {how: messages(q)}
