"""Per-question results and the report built from them: means with bootstrap CIs, skip and error counts.

Results are kept as columns (``SampleTable``: one array per metric and per stage's latency), so a study
aggregates 1,395 questions with a few array operations after every trial; the per-question
``SampleRecord`` objects that files and traces show are built from the columns only when read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from composer.data.types import StageError as StageError
from composer.evaluation.artifacts import (
    QUESTION_TABLE,
    Cells,
    Memo,
    question_table,
    sample_columns,
    samples_csv,
    trace_lines,
)
from composer.evaluation.breakdowns import breakdown_samples, conversation_codes
from composer.evaluation.table import Column as Column
from composer.evaluation.table import SampleRecord as SampleRecord
from composer.evaluation.table import SampleTable as SampleTable
from composer.evaluation.table import concat_tables as concat_tables
from composer.evaluation.table import strict_json as strict_json
from composer.files import write_atomic
from composer.metrics import stats as metric_stats


@dataclass(frozen=True)
class MetricStats:
    """Mean, standard deviation and 95% bootstrap interval of one metric over the samples that scored it."""

    mean: float
    std: float
    ci_low: float
    ci_high: float
    n: int


@dataclass(frozen=True)
class GateResult:
    """The gate's verdict: the two systems' scores, new minus baseline with its 95% paired bootstrap CI
    over the ``n`` shared questions, and whether the new one passes (``passed``, with the ``reason``)."""

    metric: str
    weights: Mapping[str, float]
    n: int
    new: float
    baseline: float
    difference: float
    ci95: tuple[float, float]
    margin: float
    passed: bool
    reason: str
    baseline_source: str
    notes: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        """What ``composer eval --baseline`` exits with: 0 passes, 1 fails the CI job."""
        return 0 if self.passed else 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric, "weights": dict(self.weights), "n": self.n, "new": self.new,
            "baseline": self.baseline, "difference": self.difference, "ci95": list(self.ci95),
            "margin": self.margin, "decision": "pass" if self.passed else "fail", "passed": self.passed,
            "reason": self.reason, "baseline_source": self.baseline_source, "notes": list(self.notes),
        }


class EvaluationReport:
    """The result of scoring a question set: per-question results plus aggregate views of them.

    A snapshot: built from ``SampleRecord`` objects or, by scoring code, from a ``SampleTable``;
    statistics are bootstrapped once and reused. ``composer.evaluate`` returns one.

    Args:
        samples: The per-question results.
        ks: The retrieval metrics' cutoffs.
        match_mode: How retrieved ids were matched to relevant ones.
        meta: What was scored (system, index...), saved with the summary.
        gate: The CI gate's verdict against a baseline (``composer.evaluate(baseline=...)``), saved with
            the summary as ``gate``; None without a baseline.

    Example:
        ::

            report = composer.evaluate("examples/arcd-sample/bm25-run.jsonl",
                                       "examples/arcd-sample/questions.jsonl",
                                       "examples/arcd-sample/corpus.jsonl")
            report.means()["ndcg@10"], report.stats()["recall@5"].ci_low
            report.save("report/")
    """

    def __init__(
        self,
        samples: Sequence[SampleRecord] | SampleTable,
        ks: Sequence[int],
        match_mode: str,
        meta: Mapping[str, Any] | None = None,
        *,
        gate: GateResult | None = None,
    ) -> None:
        if isinstance(samples, SampleTable):
            self.table = samples
        else:
            self.table = SampleTable.from_records(samples)
            self.__dict__["samples"] = tuple(samples)
        self.ks = tuple(ks)
        self.match_mode = match_mode
        self.meta = dict(meta or {})
        self.gate = gate
        clash = set(self.meta) & _SUMMARY_KEYS
        if clash:
            raise ValueError(f"meta keys clash with summary keys: {sorted(clash)}")

    def with_meta(self, meta: Mapping[str, Any]) -> EvaluationReport:
        """The same results with more meta (the index, the pipeline, the LLM section)."""
        return EvaluationReport(self.table, self.ks, self.match_mode, {**self.meta, **meta}, gate=self.gate)

    def with_gate(self, gate: GateResult) -> EvaluationReport:
        """The same results with the CI gate's verdict against a baseline."""
        return EvaluationReport(self.table, self.ks, self.match_mode, self.meta, gate=gate)

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
        bootstrap that ``stats`` pays for its intervals.

        Returns:
            Metric name (``ndcg@10``, ``token_f1``...) -> mean.

        Example:
            ::

                report.means()["ndcg@10"]
        """
        return dict(self._means)

    def means_of(self, names: Iterable[str]) -> dict[str, float]:
        """``means`` of the metrics ``names`` alone (those scored): a pruning step, every 50 questions,
        reads only what its objective weighs, not the ~40 metrics of every k."""
        if "_means" in self.__dict__:
            return {name: self._means[name] for name in names if name in self._means}
        return {name: metric_stats.mean(vals) for name in names if (vals := self.values(name)).size}

    @cached_property
    def _stats(self) -> dict[str, MetricStats]:
        conversations = self.table.conversations
        if conversations is not None:  # the turns of a conversation are resampled together
            codes = conversation_codes(conversations)
            return {name: _described(column[rows], codes[rows])
                    for name, column in self.table.metrics.items() if (rows := ~np.isnan(column)).any()}
        scored = {name: vals for name in self.metric_names if (vals := self.values(name)).size}
        intervals = metric_stats.bootstrap_cis(list(scored.values()))
        return {
            name: MetricStats(metric_stats.mean(vals), metric_stats.std(vals), low, high, int(vals.size))
            for (name, vals), (low, high) in zip(scored.items(), intervals, strict=True)
        }

    def stats(self) -> dict[str, MetricStats]:
        """Per metric: mean, sample std, 95% bootstrap CI and the number of questions scored.

        Returns:
            Metric name -> its ``MetricStats`` (``mean``, ``std``, ``ci_low``, ``ci_high``, ``n``).

        Example:
            ::

                report.stats()["hit_rate@5"].ci_low
        """
        return dict(self._stats)

    @cached_property
    def _breakdowns(self) -> dict[str, MetricStats]:
        return {name: _described(*sample) for name, sample in breakdown_samples(self.table)}

    def breakdowns(self) -> dict[str, MetricStats]:
        """A conversational set's scores by turn (``composer.evaluation.breakdowns``), each with its 95%
        interval over conversations; empty for a set of lone questions.

        Returns:
            ``<metric>.<view>`` (``recall@5.follow_up``, ``ndcg@10.turn_2``, ``recall@5.conversation``,
            ``all_found@5.conversation``) -> its ``MetricStats`` (``n``: turns, or conversations).

        Example:
            ::

                report.breakdowns()["recall@5.follow_up"].mean
        """
        return dict(self._breakdowns)

    def breakdown_means(self) -> dict[str, float]:
        """``breakdowns``' means alone, without their bootstrap: what a trial's MLflow run logs."""
        if "_breakdowns" in self.__dict__:
            return {name: st.mean for name, st in self._breakdowns.items()}
        return {name: metric_stats.mean(values) for name, (values, _) in breakdown_samples(self.table)}

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
        if self.table.conversations is not None and self.table.follow_ups is not None:
            breakdowns = self.breakdowns()
            core["conversations"] = {
                "n_conversations": len(set(self.table.conversations)),
                "n_follow_ups": sum(self.table.follow_ups),
                "metrics": {name: st.mean for name, st in breakdowns.items()},
                "ci": {name: [st.ci_low, st.ci_high] for name, st in breakdowns.items()},
                "n_scored": {name: st.n for name, st in breakdowns.items()},
            }
        if self.gate is not None:
            core["gate"] = self.gate.to_dict()
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
        ids = [row.decode() for row in Cells(self.table, Memo()).retrieved_ids]
        return pd.DataFrame(sample_columns(self.table, ids))

    def save(self, directory: str | Path, *, texts: bool = True) -> Path:
        """Write summary.json, samples.csv, traces.jsonl and error_rates.json into ``directory`` (see
        ``composer.evaluation.artifacts``), each whole or not at all.

        Args:
            directory: The folder, created if missing.
            texts: Whether traces.jsonl carries the retrieved texts (False leaves them out).

        Returns:
            The folder.

        Example:
            ::

                report.save("report/")
        """
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        for name, text in report_files(self, texts=texts).items():
            write_atomic(out / name, text)
        return out


_SUMMARY_KEYS = frozenset(
    {"n_questions", "match", "ks", "metrics", "ci", "std", "n_scored", "skipped", "errors", "latency_ms",
     "gate", "conversations"}
)


def _described(values: npt.NDArray[np.float64], groups: npt.NDArray[np.intp] | None) -> MetricStats:
    """Mean, std and 95% bootstrap interval of ``values``, resampling ``groups`` whole (conversations)."""
    low, high = metric_stats.bootstrap_ci(values, groups=groups)
    return MetricStats(metric_stats.mean(values), metric_stats.std(values), low, high, int(values.size))


def report_files(
    report: EvaluationReport,
    *,
    texts: bool = True,
    expectations: Mapping[str, Mapping[str, Any]] | None = None,
    memo: Memo | None = None,
) -> dict[str, bytes]:
    """summary.json, samples.csv, traces.jsonl and error_rates.json by name (their UTF-8 bytes), and
    questions.json when ``expectations`` (question id -> ``expected_ids``, ``expected_response``) are
    given; ``texts=False`` keeps retrieved texts out of traces.jsonl (a study logs each index's chunk
    texts once)."""
    cells = Cells(report.table, memo or Memo())
    files = {
        "summary.json": (report.summary_json() + "\n").encode(),
        "samples.csv": samples_csv(cells),
        "traces.jsonl": b"".join(trace_lines(cells, texts=texts)),
        "error_rates.json": (strict_json(report.error_rates()) + "\n").encode(),
    }
    if expectations is not None:
        files[QUESTION_TABLE] = question_table(cells, expectations)
    return files
