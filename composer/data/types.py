"""The records that flow through Composer: documents, questions, retrieved hits, a stage's failure."""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from composer.unicode import normal_id

if TYPE_CHECKING:
    from composer.data.documents.tally import ReadTally


@dataclass(frozen=True)
class Document:
    """One document of a corpus.

    Attributes:
        id: Its id, as questions' ``relevant_ids`` name it.
        text: Its text.
        title: Its title ("" when none).
        metadata: Anything else its row carried.

    Example:
        ::

            doc = composer.Document("d1", "Cairo is the capital of Egypt.", title="Cairo")
    """

    id: str
    text: str
    title: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Ids are NFC however the document was made (``normal_id``), so one built in Python matches a
        retriever's or a run's ids as a loaded one does."""
        if not unicodedata.is_normalized("NFC", self.id):
            object.__setattr__(self, "id", normal_id(self.id))


Role = Literal["user", "assistant"]
"""Who said a turn of a conversation."""


@dataclass(frozen=True)
class Turn:
    """One earlier turn of a conversation, as a question's ``history`` holds it.

    Attributes:
        role: ``user`` or ``assistant``.
        text: What was said.

    Example:
        ::

            history = (composer.Turn("user", "من هو جمال خاشقجي؟"), composer.Turn("assistant", "صحفي سعودي."))
    """

    role: Role
    text: str

    def to_dict(self) -> dict[str, str]:
        """As files and chat APIs write a turn: ``{"role", "text"}``."""
        return {"role": self.role, "text": self.text}


@dataclass(frozen=True)
class Question:
    """One question of a question set, with what scores an answer to it.

    Attributes:
        id: Its id.
        question: Its text.
        relevant_ids: The documents (or chunks) that answer it: what retrieval metrics count.
        reference_answer: The answer LLM judges compare with.
        answers: Gold answers for token F1 and exact match.
        context: Reference passages.
        metadata: Anything else its row carried.
        conversation_id: The conversation it belongs to; None for a question that stands alone.
        turn: Its position among its conversation's user turns, from 1; None when not given.
        history: The conversation's earlier turns, oldest first: what a follow-up leans on.
        standalone: A gold rewrite of the question that needs no history (scores a rewriter).

    Example:
        ::

            q = composer.Question("q1", "What is the capital of Egypt?", relevant_ids=("d1",),
                                  answers=("Cairo",))
    """

    id: str
    question: str
    relevant_ids: tuple[str, ...] = ()
    reference_answer: str | None = None
    answers: tuple[str, ...] = ()
    context: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    conversation_id: str | None = None
    turn: int | None = None
    history: tuple[Turn, ...] = ()
    standalone: str | None = None

    def __post_init__(self) -> None:
        """Its id and relevant ids are NFC however it was made (see ``Document``)."""
        if not unicodedata.is_normalized("NFC", self.id):
            object.__setattr__(self, "id", normal_id(self.id))
        if not all(unicodedata.is_normalized("NFC", r) for r in self.relevant_ids):
            object.__setattr__(self, "relevant_ids", tuple(normal_id(r) for r in self.relevant_ids))

    @property
    def is_follow_up(self) -> bool:
        """A turn after the first of its conversation: an earlier user turn to lean on (a history of an
        assistant's greeting alone leaves a first turn)."""
        return any(t.role == "user" for t in self.history)

    @property
    def conversation(self) -> str:
        """The key its conversation is grouped by: its ``conversation_id``, else its own id (a question that
        stands alone is a conversation of one), so splits and bootstraps never part a conversation."""
        return self.conversation_id if self.conversation_id is not None else self.id

    @property
    def gold_answers(self) -> tuple[str, ...]:
        """Every gold answer, reference first, without duplicates."""
        seen: dict[str, None] = {}
        if self.reference_answer:
            seen[self.reference_answer] = None
        for a in self.answers:
            if a:
                seen.setdefault(a, None)
        return tuple(seen)


@dataclass(frozen=True)
class Hit:
    """One retrieved item: a document or chunk id, its score, and where known its text and document.

    Attributes:
        id: The chunk's (or document's) id.
        score: Its score (higher is better).
        text: Its text, where known.
        doc_id: The document a chunk belongs to, where known.

    Example:
        ::

            for hit in pipe.search("متى ولد جمال خاشقجي؟", k=3):
                print(hit.id, hit.score, hit.doc_id)
    """

    id: str
    score: float
    text: str | None = None
    doc_id: str | None = None


HitLists = dict[str, list[Hit]]
"""Question id -> hits in the system's rank order."""


@dataclass(frozen=True)
class StageError:
    """A failure in one stage of one question (retrieval, generation, judging...): counted, never fatal."""

    stage: str
    kind: str
    message: str

    def __str__(self) -> str:
        """As samples.csv and the question table show it: ``generation: TimeoutError: ...``."""
        return f"{self.stage}: {self.kind}: {self.message}"


@dataclass
class Corpus:
    """The documents a system searches, by id.

    Attributes:
        documents: The documents, in their file's order.
        source: Where they were read from.
        tally: What reading a folder did (files, pages, skips, repairs); None for tables and memory.

    Example:
        ::

            from composer.data import load_corpus

            corpus = load_corpus("examples/arcd-sample/corpus.jsonl")
            print(len(corpus), corpus.get("arcd-000-0"))
    """

    documents: list[Document]
    source: str = "<memory>"
    tally: ReadTally | None = field(default=None, compare=False, repr=False)
    """What reading a folder did (files, pages, skips, repairs); None for tables and memory."""

    def __post_init__(self) -> None:
        self._by_id = {d.id: d for d in self.documents}
        self._fingerprint: str | None = None

    def __len__(self) -> int:
        return len(self.documents)

    def __iter__(self) -> Iterator[Document]:
        return iter(self.documents)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._by_id

    def get(self, doc_id: str) -> Document | None:
        """The document with id ``doc_id``, or None."""
        return self._by_id.get(doc_id)

    def fingerprint(self) -> str:
        """Content hash of ids, titles and texts: equal corpora share indexes, changed ones never do.
        Computed once (a corpus is not changed after loading): every trial of a study asks for it."""
        if self._fingerprint is None:
            self._fingerprint = self._hash()
        return self._fingerprint

    def _hash(self) -> str:
        h = hashlib.sha256()
        for d in sorted(self.documents, key=lambda d: d.id):
            h.update(json.dumps([d.id, d.title, d.text], ensure_ascii=False).encode("utf-8"))
            h.update(b"\n")
        return h.hexdigest()[:16]


@dataclass
class QuestionSet:
    """The questions a system is scored on, in their file's order.

    Attributes:
        questions: The questions.
        source: Where they were read from.

    Example:
        ::

            from composer.data import load_questions

            questions = load_questions("examples/arcd-sample/questions.jsonl")
            first_ten = questions.subset([q.id for q in questions][:10])
    """

    questions: list[Question]
    source: str = "<memory>"

    def __post_init__(self) -> None:
        self._fingerprint: str | None = None

    def __len__(self) -> int:
        return len(self.questions)

    def __iter__(self) -> Iterator[Question]:
        return iter(self.questions)

    def subset(self, ids: Sequence[str]) -> QuestionSet:
        """The questions whose id is in ``ids``, in this set's order."""
        wanted = set(ids)
        return QuestionSet([q for q in self.questions if q.id in wanted], self.source)

    def fingerprint(self) -> str:
        """Content hash of every field scoring reads (metadata aside), in order: reports and studies
        record it, so scores of an edited question set are never taken for scores of the old one.
        Computed once (a question set is not changed after loading)."""
        if self._fingerprint is None:
            self._fingerprint = self._hash()
        return self._fingerprint

    def conversations(self) -> dict[str, list[Question]]:
        """The questions by conversation (``Question.conversation``), each in this set's order."""
        groups: dict[str, list[Question]] = {}
        for q in self.questions:
            groups.setdefault(q.conversation, []).append(q)
        return groups

    def has_follow_ups(self) -> bool:
        """Whether any question leans on earlier turns: what a conversation stage is for."""
        return any(q.is_follow_up for q in self.questions)

    def _hash(self) -> str:
        h = hashlib.sha256()
        for q in self.questions:
            fields: list[Any] = [
                q.id, q.question, list(q.relevant_ids), q.reference_answer, list(q.answers), list(q.context)
            ]
            if q.conversation_id is not None or q.turn is not None or q.history or q.standalone is not None:
                # Only a conversational question hashes these: a standalone set keeps its fingerprint.
                fields += [q.conversation_id, q.turn, [t.to_dict() for t in q.history], q.standalone]
            h.update(json.dumps(fields, ensure_ascii=False).encode("utf-8"))
        return h.hexdigest()[:16]
