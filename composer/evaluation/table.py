"""Per-question results as columns (``SampleTable``) and the strict JSON every report file is written in.

Below both the report (means, CIs, summaries) and its files (``composer.evaluation.artifacts``), which each
read the same table.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from composer.data.ranking import Ranking
from composer.data.types import Hit, Question, StageError

Column = npt.NDArray[np.float64]
"""One value per question; NaN where the question was not scored (or the stage did not run)."""


@dataclass
class SampleRecord:
    """Everything Composer knows about one question: what was retrieved, answered, scored, and how fast.

    A metric is ``None`` when it was not scored; ``skipped`` says why, per metric group
    (e.g. ``{"retrieval": "no_labels"}``), so means leave the sample out instead of counting it as 0.
    """

    question_id: str
    question: str
    retrieved: list[Hit] = field(default_factory=list)
    answer: str | None = None
    metrics: dict[str, float | None] = field(default_factory=dict)
    latency: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    error: StageError | None = None
    context_tokens: int | None = None
    reasons: dict[str, str] = field(default_factory=dict)  # why a judge gave its score, per metric
    conversation: str | None = None  # its conversation's key (``Question.conversation``); None: stands alone
    turn: int | None = None  # its position among its conversation's user turns, from 1
    follow_up: bool = False  # whether it has earlier turns to lean on (``Question.is_follow_up``)
    searched_query: str | None = None  # what was searched for it, where its conversation changed that


@dataclass
class SampleTable:
    """Results of a question set as columns, row i being ``question_ids[i]``.

    ``retrieved`` is a Ranking (hits built on demand) or one hit list per question; ``skipped`` maps a
    metric group to each question's skip reason (None: not skipped); ``errors`` and ``reasons`` are sparse,
    keyed by row. ``conversations``, ``turns`` and ``follow_ups`` say where each question stands in its
    conversation (``conversation_columns``); None for a set of lone questions, whose files stay as they were.
    """

    question_ids: tuple[str, ...]
    questions: tuple[str, ...]
    metrics: dict[str, Column] = field(default_factory=dict)
    latency: dict[str, Column] = field(default_factory=dict)
    context_tokens: Column | None = None
    retrieved: Ranking | Sequence[list[Hit]] | None = None
    answers: Sequence[str | None] | None = None
    skipped: dict[str, list[str | None]] = field(default_factory=dict)
    errors: dict[int, StageError] = field(default_factory=dict)
    reasons: dict[int, dict[str, str]] = field(default_factory=dict)
    conversations: tuple[str, ...] | None = None
    turns: tuple[int, ...] | None = None
    follow_ups: tuple[bool, ...] | None = None
    searched: tuple[str, ...] | None = None
    """The query searched per question (``composer.retrieval.conversation``); None where each searched its
    own words and none has history."""

    def __len__(self) -> int:
        return len(self.question_ids)

    @classmethod
    def from_records(cls, records: Sequence[SampleRecord]) -> SampleTable:
        n = len(records)
        names = list(dict.fromkeys(name for r in records for name in r.metrics))
        stages = list(dict.fromkeys(stage for r in records for stage in r.latency))
        groups = list(dict.fromkeys(group for r in records for group in r.skipped))
        tokens = [r.context_tokens for r in records]
        talk = any(r.conversation is not None for r in records)
        return cls(
            question_ids=tuple(r.question_id for r in records),
            questions=tuple(r.question for r in records),
            metrics={name: _column([r.metrics.get(name) for r in records]) for name in names},
            latency={stage: _column([r.latency.get(stage) for r in records]) for stage in stages},
            context_tokens=_column(tokens) if any(t is not None for t in tokens) else None,
            retrieved=[list(r.retrieved) for r in records],
            answers=[r.answer for r in records] if n else None,
            skipped={group: [r.skipped.get(group) for r in records] for group in groups},
            errors={i: r.error for i, r in enumerate(records) if r.error is not None},
            reasons={i: dict(r.reasons) for i, r in enumerate(records) if r.reasons},
            conversations=tuple(r.conversation or r.question_id for r in records) if talk else None,
            turns=tuple(r.turn or 1 for r in records) if talk else None,
            follow_ups=tuple(r.follow_up for r in records) if talk else None,
            searched=tuple(r.searched_query or r.question for r in records)
            if any(r.searched_query is not None for r in records) else None,
        )

    def records(self) -> list[SampleRecord]:
        """The per-question records (built now; a report keeps them once built)."""
        names = list(self.metrics)
        values = {name: optional_values(col) for name, col in self.metrics.items()}
        latency = {stage: col.tolist() for stage, col in self.latency.items()}
        tokens = optional_values(self.context_tokens) if self.context_tokens is not None else None
        out = []
        for i, (qid, question) in enumerate(zip(self.question_ids, self.questions, strict=True)):
            out.append(
                SampleRecord(
                    qid,
                    question,
                    retrieved=self._hits(i),
                    answer=self.answers[i] if self.answers is not None else None,
                    metrics={name: values[name][i] for name in names},
                    latency={stage: v[i] for stage, v in latency.items() if not math.isnan(v[i])},
                    skipped={g: r for g, reasons in self.skipped.items() if (r := reasons[i]) is not None},
                    error=self.errors.get(i),
                    context_tokens=None if tokens is None or (n := tokens[i]) is None else int(n),
                    reasons=dict(self.reasons.get(i, {})),
                    conversation=None if self.conversations is None else self.conversations[i],
                    turn=None if self.turns is None else self.turns[i],
                    follow_up=self.follow_ups is not None and self.follow_ups[i],
                    searched_query=None if self.searched is None else self.searched[i],
                )
            )
        return out

    def head(self, n: int) -> SampleTable:
        """The first ``n`` questions (a pruned trial's report so far)."""
        if n >= len(self):
            return self
        retrieved: Ranking | Sequence[list[Hit]] | None = self.retrieved
        if isinstance(retrieved, Ranking):
            retrieved = retrieved.rows(0, n)
        elif retrieved is not None:
            retrieved = retrieved[:n]
        return SampleTable(
            self.question_ids[:n],
            self.questions[:n],
            metrics={name: col[:n] for name, col in self.metrics.items()},
            latency={stage: col[:n] for stage, col in self.latency.items()},
            context_tokens=None if self.context_tokens is None else self.context_tokens[:n],
            retrieved=retrieved,
            answers=None if self.answers is None else self.answers[:n],
            skipped={
                g: reasons[:n]
                for g, reasons in self.skipped.items()
                if any(r is not None for r in reasons[:n])
            },
            errors={i: e for i, e in self.errors.items() if i < n},
            reasons={i: r for i, r in self.reasons.items() if i < n},
            conversations=None if self.conversations is None else self.conversations[:n],
            turns=None if self.turns is None else self.turns[:n],
            follow_ups=None if self.follow_ups is None else self.follow_ups[:n],
            searched=None if self.searched is None else self.searched[:n],
        )

    def _hits(self, row: int) -> list[Hit]:
        if self.retrieved is None:
            return []
        if isinstance(self.retrieved, Ranking):
            return self.retrieved.hits(row)
        return list(self.retrieved[row])


def concat_tables(tables: Sequence[SampleTable]) -> SampleTable:
    """Batches one after another, as one table: a metric or stage a batch lacks is NaN there."""
    if len(tables) == 1:
        return tables[0]
    sizes = [len(t) for t in tables]
    offsets = np.cumsum([0, *sizes[:-1]]).tolist()

    def stacked(columns: Iterable[Mapping[str, Column]]) -> dict[str, Column]:
        parts = list(columns)
        names = list(dict.fromkeys(name for part in parts for name in part))
        return {
            name: np.concatenate([p.get(name, np.full(n, np.nan)) for p, n in zip(parts, sizes, strict=True)])
            for name in names
        }

    groups = list(dict.fromkeys(g for t in tables for g in t.skipped))
    has_tokens = any(t.context_tokens is not None for t in tables)
    talk = any(t.conversations is not None for t in tables)
    return SampleTable(
        question_ids=tuple(q for t in tables for q in t.question_ids),
        questions=tuple(q for t in tables for q in t.questions),
        metrics=stacked(t.metrics for t in tables),
        latency=stacked(t.latency for t in tables),
        context_tokens=np.concatenate(
            [t.context_tokens if t.context_tokens is not None else np.full(len(t), np.nan) for t in tables]
        )
        if has_tokens
        else None,
        retrieved=[t._hits(i) for t in tables for i in range(len(t))],
        answers=[t.answers[i] if t.answers is not None else None for t in tables for i in range(len(t))],
        skipped={g: [r for t in tables for r in t.skipped.get(g, [None] * len(t))] for g in groups},
        errors={off + i: e for t, off in zip(tables, offsets, strict=True) for i, e in t.errors.items()},
        reasons={off + i: r for t, off in zip(tables, offsets, strict=True) for i, r in t.reasons.items()},
        # A batch of lone questions in a conversational set: each its own conversation, a first turn.
        conversations=tuple(k for t in tables for k in t.conversations or t.question_ids) if talk else None,
        turns=tuple(p for t in tables for p in t.turns or (1,) * len(t)) if talk else None,
        follow_ups=tuple(f for t in tables for f in t.follow_ups or (False,) * len(t)) if talk else None,
        searched=tuple(s for t in tables for s in t.searched or t.questions)
        if any(t.searched is not None for t in tables) else None,
    )


def conversation_columns(
    questions: Sequence[Question],
) -> tuple[tuple[str, ...], tuple[int, ...], tuple[bool, ...]] | None:
    """Each question's conversation key, turn position (its ``turn``, else one past the user turns of its
    history) and whether it is a follow-up: ``SampleTable``'s conversation columns. None when no question
    belongs to a conversation: a set of lone questions keeps its files and summary as they were."""
    if not any(q.conversation_id is not None or q.turn is not None or q.history for q in questions):
        return None
    return (
        tuple(q.conversation for q in questions),
        tuple(1 + sum(t.role == "user" for t in q.history) if q.turn is None else q.turn for q in questions),
        tuple(q.is_follow_up for q in questions),
    )


def _column(values: Sequence[float | int | None]) -> Column:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)


def optional_values(column: Column) -> list[float | None]:
    """The column's values, None where NaN."""
    values: list[float | None] = column.tolist()
    return [None if v is None or math.isnan(v) else v for v in values] if np.isnan(column).any() else values


def strict_json(obj: Any, indent: int | None = 2) -> str:
    """Strict JSON (NaN would make the file unreadable to most parsers), Arabic kept readable. Most objects
    hold no NaN: they are dumped as they are, and only the others walked for it."""
    try:
        return json.dumps(obj, ensure_ascii=False, indent=indent, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(obj), ensure_ascii=False, indent=indent, allow_nan=False)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj
