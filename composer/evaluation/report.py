"""Per-question results and the report built from them: means with bootstrap CIs, skip and error counts.

Results are kept as columns (``SampleTable``: one array per metric and per stage's latency), so a study
aggregates 1,395 questions with a few array operations after every trial; the per-question
``SampleRecord`` objects that files and traces show are built from the columns only when read.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from composer.data.ranking import Ranking
from composer.data.types import Hit
from composer.files import write_atomic
from composer.metrics import stats as metric_stats

Column = npt.NDArray[np.float64]
"""One value per question; NaN where the question was not scored (or the stage did not run)."""


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


@dataclass
class SampleTable:
    """Results of a question set as columns, row i being ``question_ids[i]``.

    ``retrieved`` is a Ranking (hits built on demand) or one hit list per question; ``skipped`` maps a
    metric group to each question's skip reason (None: not skipped); ``errors`` and ``reasons`` are sparse,
    keyed by row.
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

    def __len__(self) -> int:
        return len(self.question_ids)

    @classmethod
    def from_records(cls, records: Sequence[SampleRecord]) -> SampleTable:
        n = len(records)
        names = list(dict.fromkeys(name for r in records for name in r.metrics))
        stages = list(dict.fromkeys(stage for r in records for stage in r.latency))
        groups = list(dict.fromkeys(group for r in records for group in r.skipped))
        tokens = [r.context_tokens for r in records]
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
    )


def _column(values: Sequence[float | int | None]) -> Column:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)


def optional_values(column: Column) -> list[float | None]:
    """The column's values, None where NaN."""
    values: list[float | None] = column.tolist()
    return [None if v is None or math.isnan(v) else v for v in values] if np.isnan(column).any() else values


@dataclass(frozen=True)
class MetricStats:
    """Mean, standard deviation and 95% bootstrap interval of one metric over the samples that scored it."""

    mean: float
    std: float
    ci_low: float
    ci_high: float
    n: int


class EvaluationReport:
    """The result of scoring a question set: per-question results plus aggregate views of them.

    A snapshot: built from ``SampleRecord`` objects or, by scoring code, from a ``SampleTable``;
    statistics are bootstrapped once and reused.
    """

    def __init__(
        self,
        samples: Sequence[SampleRecord] | SampleTable,
        ks: Sequence[int],
        match_mode: str,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(samples, SampleTable):
            self.table = samples
        else:
            self.table = SampleTable.from_records(samples)
            self.__dict__["samples"] = tuple(samples)
        self.ks = tuple(ks)
        self.match_mode = match_mode
        self.meta = dict(meta or {})
        clash = set(self.meta) & _SUMMARY_KEYS
        if clash:
            raise ValueError(f"meta keys clash with summary keys: {sorted(clash)}")

    def with_meta(self, meta: Mapping[str, Any]) -> EvaluationReport:
        """The same results with more meta (the index, the pipeline, the LLM section)."""
        return EvaluationReport(self.table, self.ks, self.match_mode, {**self.meta, **meta})

    @cached_property
    def samples(self) -> tuple[SampleRecord, ...]:
        return tuple(self.table.records())

    def __len__(self) -> int:
        return len(self.table)

    @property
    def metric_names(self) -> list[str]:
        """Metric names in first-seen order (retrieval metrics by k first, as scoring records them)."""
        return list(self.table.metrics)

    def values(self, name: str) -> npt.NDArray[np.float64]:
        """The scored (non-NaN) values of one metric, in question order."""
        column = self.table.metrics.get(name)
        if column is None:
            return np.zeros(0)
        return column[~np.isnan(column)]

    @cached_property
    def _means(self) -> dict[str, float]:
        return {
            name: metric_stats.mean(vals) for name in self.metric_names if (vals := self.values(name)).size
        }

    def means(self) -> dict[str, float]:
        """Per metric, the mean over the questions that scored it: what an objective reads, without the
        bootstrap that ``stats`` pays for its intervals."""
        return dict(self._means)

    @cached_property
    def _stats(self) -> dict[str, MetricStats]:
        scored = {name: vals for name in self.metric_names if (vals := self.values(name)).size}
        intervals = metric_stats.bootstrap_cis(list(scored.values()))
        return {
            name: MetricStats(metric_stats.mean(vals), metric_stats.std(vals), low, high, int(vals.size))
            for (name, vals), (low, high) in zip(scored.items(), intervals, strict=True)
        }

    def stats(self) -> dict[str, MetricStats]:
        """Per metric: mean, sample std, 95% bootstrap CI and the number of questions scored."""
        return dict(self._stats)

    def skip_counts(self) -> dict[str, int]:
        """How many questions skipped some metric group, by reason (no_labels, empty_answer, refusal...)."""
        return dict(Counter(r for reasons in self.table.skipped.values() for r in reasons if r is not None))

    def error_counts(self) -> dict[str, dict[str, int]]:
        """Errors per stage and kind, e.g. ``{"generation": {"TimeoutError": 2}}``."""
        out: dict[str, dict[str, int]] = {}
        for error in self.table.errors.values():
            by_kind = out.setdefault(error.stage, {})
            by_kind[error.kind] = by_kind.get(error.kind, 0) + 1
        return out

    def latency_ms(self) -> dict[str, dict[str, float]]:
        """Per stage: mean, median and 95th percentile latency in milliseconds."""
        out: dict[str, dict[str, float]] = {}
        for stage, column in self.table.latency.items():
            ms = column[~np.isnan(column)] * 1000.0
            if ms.size:
                out[stage] = {
                    "mean": float(ms.mean()),
                    "p50": float(np.percentile(ms, 50)),
                    "p95": float(np.percentile(ms, 95)),
                }
        return out

    def mean_context_tokens(self) -> float:
        """Mean whitespace tokens of the retrieved texts per question (0 when none had text)."""
        tokens = self.table.context_tokens
        if tokens is None or np.isnan(tokens).all():
            return 0.0
        return float(np.nanmean(tokens))

    def summary(self) -> dict[str, Any]:
        """The report as one JSON-ready dict; metric keys keep their "@" (``recall@10``)."""
        stats = self.stats()
        core: dict[str, Any] = {
            "n_questions": len(self),
            "match": self.match_mode,
            "ks": list(self.ks),
            "metrics": {name: st.mean for name, st in stats.items()},
            "ci": {name: [st.ci_low, st.ci_high] for name, st in stats.items()},
            "std": {name: st.std for name, st in stats.items()},
            "n_scored": {name: st.n for name, st in stats.items()},
            "skipped": self.skip_counts(),
            "errors": self.error_counts(),
            "latency_ms": self.latency_ms(),
        }
        return {**core, **self.meta}

    def summary_json(self) -> str:
        """The summary as strict JSON (non-finite numbers become null), Arabic and Persian kept readable."""
        return strict_json(self.summary())

    def error_rates(self) -> dict[str, Any]:
        """Counts and rates over all questions: errors by stage and kind, skips by group and reason, and
        the LLM calls' failures by kind when the run used an LLM (``meta["llm"]["error_rates"]``)."""
        n = len(self)

        def rate(count: int) -> dict[str, float | int]:
            return {"count": count, "rate": count / n if n else 0.0}

        skipped: dict[str, dict[str, dict[str, float | int]]] = {}
        for group, reasons in self.table.skipped.items():
            for reason, count in Counter(r for r in reasons if r is not None).items():
                skipped.setdefault(group, {})[reason] = rate(count)
        errors = {
            stage: {kind: rate(count) for kind, count in kinds.items()}
            for stage, kinds in self.error_counts().items()
        }
        out: dict[str, Any] = {
            "n_samples": n,
            "failed": rate(len(self.table.errors)),
            "errors": errors,
            "skipped": dict(sorted(skipped.items())),
        }
        llm = self.meta.get("llm")
        if isinstance(llm, Mapping) and "error_rates" in llm:
            out["llm"] = llm["error_rates"]
        return out

    def to_dataframe(self) -> pd.DataFrame:
        """One row per question: ids, answer, every metric, latency per stage, skip reasons and error."""
        from composer.evaluation.artifacts import Cells, Memo

        return pd.DataFrame(self.sample_columns(Cells(self.table, Memo()).retrieved_ids))

    def sample_columns(self, retrieved_ids: Sequence[str]) -> dict[str, Sequence[Any]]:
        """The columns of ``to_dataframe`` (and samples.csv), metrics and latencies as numbers (None where
        missing); ``retrieved_ids`` is each question's retrieved ids as a JSON list."""
        t = self.table
        n = len(t)
        tokens = optional_values(t.context_tokens) if t.context_tokens is not None else [None] * n
        columns: dict[str, Sequence[Any]] = {
            "question_id": t.question_ids,
            "question": t.questions,
            "retrieved_ids": retrieved_ids,
            "answer": t.answers if t.answers is not None else [None] * n,
            "context_tokens": [None if v is None else int(v) for v in tokens],
        }
        columns.update({name: optional_values(col) for name, col in t.metrics.items()})
        columns.update({f"latency_{stage}_s": optional_values(col)
                        for stage, col in t.latency.items() if not np.isnan(col).all()})
        columns.update({f"skipped_{group}": reasons for group, reasons in t.skipped.items()})
        columns["error"] = [None if (e := t.errors.get(i)) is None else str(e) for i in range(n)]
        return columns

    def save(self, directory: str | Path, *, texts: bool = True) -> Path:
        """Write summary.json, samples.csv, traces.jsonl and error_rates.json into ``directory`` (see
        ``composer.evaluation.artifacts``), each whole or not at all."""
        from composer.evaluation.artifacts import report_files

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        for name, text in report_files(self, texts=texts).items():
            write_atomic(out / name, text)
        return out


_SUMMARY_KEYS = frozenset(
    {"n_questions", "match", "ks", "metrics", "ci", "std", "n_scored", "skipped", "errors", "latency_ms"}
)


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
