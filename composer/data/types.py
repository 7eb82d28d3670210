"""The records that flow through Composer: documents, questions, retrieved hits."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from composer.documents.report import CorpusReport


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    title: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    relevant_ids: tuple[str, ...] = ()
    reference_answer: str | None = None
    answers: tuple[str, ...] = ()
    context: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)

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
    """One retrieved item: a document or chunk id, its score, and where known its text and document."""

    id: str
    score: float
    text: str | None = None
    doc_id: str | None = None


Run = dict[str, list[Hit]]
"""Question id -> hits in the system's rank order."""


@dataclass
class Corpus:
    documents: list[Document]
    source: str = "<memory>"
    report: CorpusReport | None = field(default=None, compare=False, repr=False)
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
    questions: list[Question]
    source: str = "<memory>"

    def __post_init__(self) -> None:
        self._fingerprint: str | None = None

    def __len__(self) -> int:
        return len(self.questions)

    def __iter__(self) -> Iterator[Question]:
        return iter(self.questions)

    def subset(self, ids: Sequence[str]) -> QuestionSet:
        wanted = set(ids)
        return QuestionSet([q for q in self.questions if q.id in wanted], self.source)

    def fingerprint(self) -> str:
        """Content hash of every field scoring reads (metadata aside), in order: reports and studies
        record it, so scores of an edited question set are never taken for scores of the old one.
        Computed once (a question set is not changed after loading)."""
        if self._fingerprint is None:
            self._fingerprint = self._hash()
        return self._fingerprint

    def _hash(self) -> str:
        h = hashlib.sha256()
        for q in self.questions:
            h.update(
                json.dumps(
                    [
                        q.id,
                        q.question,
                        list(q.relevant_ids),
                        q.reference_answer,
                        list(q.answers),
                        list(q.context),
                    ],
                    ensure_ascii=False,
                ).encode("utf-8")
            )
        return h.hexdigest()[:16]
