"""Per-question records and the report built from them: means with bootstrap CIs, skip and error counts."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from composer.data.types import Hit
from composer.files import write_atomic
from composer.metrics import stats as metric_stats


@dataclass(frozen=True)
class StageError:
    """A failure in one stage of one question (retrieval, generation, judging...): counted, never fatal."""

    stage: str
    kind: str
    message: str


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

    def to_trace(self) -> dict[str, Any]:
        """The JSON-ready trace of this sample (one line of traces.jsonl)."""
        return {
            "question_id": self.question_id,
            "question": self.question,
            "retrieved": [
                {"id": h.id, "score": h.score, "doc_id": h.doc_id, "text": h.text} for h in self.retrieved
            ],
            "answer": self.answer,
            "metrics": self.metrics,
            "latency": self.latency,
            "skipped": self.skipped,
            "error": None if self.error is None else vars(self.error),
            "context_tokens": self.context_tokens,
            "reasons": self.reasons,
        }


@dataclass(frozen=True)
class MetricStats:
    """Mean, standard deviation and 95% bootstrap interval of one metric over the samples that scored it."""

    mean: float
    std: float
    ci_low: float
    ci_high: float
    n: int


class EvaluationReport:
    """The result of scoring a question set: per-sample records plus aggregate views of them.

    A snapshot: the samples are fixed at construction, so statistics are bootstrapped once and reused.
    """

    def __init__(
        self,
        samples: Sequence[SampleRecord],
        ks: Sequence[int],
        match_mode: str,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.samples = tuple(samples)
        self.ks = tuple(ks)
        self.match_mode = match_mode
        self.meta = dict(meta or {})
        clash = set(self.meta) & _SUMMARY_KEYS
        if clash:
            raise ValueError(f"meta keys clash with summary keys: {sorted(clash)}")
        self._stats: dict[str, MetricStats] | None = None
        self._means: dict[str, float] | None = None

    @property
    def metric_names(self) -> list[str]:
        """Metric names in first-seen order (retrieval metrics by k first, as evaluate_run records them)."""
        names: dict[str, None] = {}
        for s in self.samples:
            for name in s.metrics:
                names.setdefault(name, None)
        return list(names)

    def values(self, name: str) -> np.ndarray:
        """The scored (non-None) values of one metric, in sample order."""
        return np.array([v for s in self.samples if (v := s.metrics.get(name)) is not None], dtype=np.float64)

    def means(self) -> dict[str, float]:
        """Per metric, the mean over the samples that scored it: what an objective reads after every
        batch, without the bootstrap that ``stats`` pays for its intervals."""
        if self._means is None:
            self._means = {name: metric_stats.mean(vals) for name in self.metric_names
                           if (vals := self.values(name)).size}
        return self._means

    def stats(self) -> dict[str, MetricStats]:
        """Per metric: mean, sample std, 95% bootstrap CI and the number of samples scored."""
        if self._stats is None:
            out: dict[str, MetricStats] = {}
            for name in self.metric_names:
                vals = self.values(name)
                if vals.size == 0:
                    continue
                low, high = metric_stats.bootstrap_ci(vals)
                out[name] = MetricStats(
                    metric_stats.mean(vals), metric_stats.std(vals), low, high, int(vals.size)
                )
            self._stats = out
        return self._stats

    def skip_counts(self) -> dict[str, int]:
        """How many samples skipped some metric group, by reason (no_labels, empty_answer, refusal...)."""
        return dict(Counter(reason for s in self.samples for reason in s.skipped.values()))

    def error_counts(self) -> dict[str, dict[str, int]]:
        """Errors per stage and kind, e.g. ``{"generation": {"TimeoutError": 2}}``."""
        out: dict[str, dict[str, int]] = {}
        for s in self.samples:
            if s.error is not None:
                by_kind = out.setdefault(s.error.stage, {})
                by_kind[s.error.kind] = by_kind.get(s.error.kind, 0) + 1
        return out

    def latency_ms(self) -> dict[str, dict[str, float]]:
        """Per stage: mean, median and 95th percentile latency in milliseconds."""
        by_stage: dict[str, list[float]] = {}
        for s in self.samples:
            for stage, seconds in s.latency.items():
                by_stage.setdefault(stage, []).append(seconds * 1000.0)
        return {
            stage: {
                "mean": float(np.mean(ms)),
                "p50": float(np.percentile(ms, 50)),
                "p95": float(np.percentile(ms, 95)),
            }
            for stage, ms in by_stage.items()
        }

    def summary(self) -> dict[str, Any]:
        """The report as one JSON-ready dict; metric keys keep their "@" (``recall@10``)."""
        stats = self.stats()
        core: dict[str, Any] = {
            "n_questions": len(self.samples),
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
        return _dumps(self.summary())

    def error_rates(self) -> dict[str, Any]:
        """Counts and rates over all samples: errors by stage and kind, skips by group and reason, and
        the LLM calls' failures by kind when the run used an LLM (``meta["llm"]["error_rates"]``)."""
        n = len(self.samples)

        def rate(count: int) -> dict[str, float | int]:
            return {"count": count, "rate": count / n if n else 0.0}

        skipped: dict[str, dict[str, dict[str, float | int]]] = {}
        for (group, reason), count in Counter(
            item for s in self.samples for item in s.skipped.items()
        ).items():
            skipped.setdefault(group, {})[reason] = rate(count)
        errors = {
            stage: {kind: rate(count) for kind, count in kinds.items()}
            for stage, kinds in self.error_counts().items()
        }
        n_failed = sum(s.error is not None for s in self.samples)
        out: dict[str, Any] = {"n_samples": n, "failed": rate(n_failed), "errors": errors, "skipped": skipped}
        llm = self.meta.get("llm")
        if isinstance(llm, Mapping) and "error_rates" in llm:
            out["llm"] = llm["error_rates"]
        return out

    def to_dataframe(self) -> pd.DataFrame:
        """One row per sample: ids, answer, every metric, latency per stage, skip reasons and error."""
        names = self.metric_names  # once: it scans every sample
        rows = []
        for s in self.samples:
            row: dict[str, Any] = {
                "question_id": s.question_id,
                "question": s.question,
                "retrieved_ids": json.dumps([h.id for h in s.retrieved], ensure_ascii=False),
                "answer": s.answer,
                "context_tokens": s.context_tokens,
            }
            row.update({name: s.metrics.get(name) for name in names})
            row.update({f"latency_{stage}_s": sec for stage, sec in s.latency.items()})
            row.update({f"skipped_{group}": reason for group, reason in s.skipped.items()})
            row["error"] = None if s.error is None else f"{s.error.stage}: {s.error.kind}: {s.error.message}"
            rows.append(row)
        return pd.DataFrame(rows)

    def save(self, directory: str | Path) -> Path:
        """Write summary.json, samples.csv, traces.jsonl and error_rates.json, each whole or not at all."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(out / "summary.json", self.summary_json() + "\n")
        write_atomic(out / "samples.csv", self.to_dataframe().to_csv(index=False))
        write_atomic(
            out / "traces.jsonl",
            "".join(_dumps(s.to_trace(), indent=None) + "\n" for s in self.samples),
        )
        write_atomic(out / "error_rates.json", _dumps(self.error_rates()) + "\n")
        return out


_SUMMARY_KEYS = frozenset(
    {"n_questions", "match", "ks", "metrics", "ci", "std", "n_scored", "skipped", "errors", "latency_ms"}
)


def _dumps(obj: Any, indent: int | None = 2) -> str:
    """Strict JSON (NaN would make the file unreadable to most parsers), Arabic kept readable."""
    return json.dumps(_finite(obj), ensure_ascii=False, indent=indent, allow_nan=False)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj
