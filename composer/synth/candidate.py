"""One generated question on its way through the filters, and the question-set row it becomes."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from composer.llm.prompt import PromptLanguage
from composer.synth.passages import Passage


@dataclass
class Candidate:
    """A question asked of ``passages`` (two for multi-hop); ``ordinal`` counts earlier visits of the same
    passages for the same kind, so a repeat visit gets its own id."""

    index: int
    kind: str
    passages: tuple[Passage, ...]
    ordinal: int
    lang: PromptLanguage
    question: str | None = None
    answer: str | None = None
    span: tuple[int, int, int] | None = None  # (passage index, start, end) within that passage
    dropped: str | None = None
    detail: str = ""

    @property
    def key(self) -> str:
        return "|".join(p.key for p in self.passages)

    def qid(self, seed: int) -> str:
        """Stable across runs: the seed, kind, passages and visit fix it."""
        payload = json.dumps([seed, self.kind, [p.key for p in self.passages], self.ordinal])
        return f"syn-{self.kind.replace('_', '')}-{hashlib.sha1(payload.encode()).hexdigest()[:10]}"

    def drop(self, reason: str, detail: str = "") -> None:
        self.dropped, self.detail = reason, detail

    def row(self, seed: int, model: str) -> dict[str, Any]:
        """The question-set row (the fields ``load_questions`` reads, plus provenance in metadata).

        Unanswerable questions carry no gold at all (no relevant ids, answer or context): retrieval
        metrics skip them and ``refusal_accuracy`` scores them; ``source_doc_ids`` says where they came from.
        """
        assert self.question is not None
        docs = list(dict.fromkeys(p.doc_id for p in self.passages))
        metadata: dict[str, Any] = {
            "kind": self.kind,
            "lang": self.lang,
            "source_doc_ids": docs,
            "spans": [{"doc_id": p.doc_id, "start": p.start, "end": p.end} for p in self.passages],
            "generator": model,
            "seed": seed,
        }
        row: dict[str, Any] = {"id": self.qid(seed), "question": self.question}
        if self.kind == "unanswerable":
            return {
                **row,
                "relevant_ids": [],
                "reference_answer": None,
                "answers": [],
                "context": [],
                "metadata": metadata,
            }
        assert self.answer is not None
        if self.span is not None:
            which, start, end = self.span
            source = self.passages[which]
            metadata["answer_start"] = start
            metadata["answer_context"] = which
            metadata["answer_span"] = {
                "doc_id": source.doc_id,
                "start": source.start + start,
                "end": source.start + end,
            }
        return {
            **row,
            "relevant_ids": docs,
            "reference_answer": self.answer,
            "answers": [self.answer],
            "context": [p.text for p in self.passages],
            "metadata": metadata,
        }
