"""EvaluationReport: aggregates, skip and error counting, files written atomically."""

from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from composer.data.ranking import ChunkTable, Ranking
from composer.data.types import Hit
from composer.evaluation import EvaluationReport, SampleRecord, StageError, artifacts, render_report
from composer.evaluation import report as report_module
from composer.evaluation.table import SampleTable


def _samples() -> list[SampleRecord]:
    hits = [Hit("d1", 2.0, "نص عربي"), Hit("d2", 1.0)]
    return [
        SampleRecord(
            "q1",
            "سؤال؟",
            hits,
            "جواب",
            {"recall@5": 1.0, "ndcg@5": 1.0, "token_f1": 0.5},
            {"retrieve": 0.010},
        ),
        SampleRecord(
            "q2", "b", hits, "x", {"recall@5": 0.0, "ndcg@5": 0.0, "token_f1": 1.0}, {"retrieve": 0.030}
        ),
        SampleRecord(
            "q3",
            "c",
            hits,
            "",
            {"recall@5": 1.0, "ndcg@5": 0.5, "token_f1": None},
            {"retrieve": 0.020},
            skipped={"answer": "empty_answer"},
        ),
        SampleRecord(
            "q4",
            "d",
            [],
            None,
            {"recall@5": None, "ndcg@5": None, "token_f1": None},
            skipped={"retrieval": "no_labels"},
            error=StageError("generation", "TimeoutError", "30 s"),
        ),
    ]


def _report() -> EvaluationReport:
    return EvaluationReport(_samples(), ks=(5,), match_mode="document", meta={"cache": {"reused": 3}})


def test_summary_means_leave_out_unscored_samples() -> None:
    summary = _report().summary()
    assert summary["n_questions"] == 4
    assert summary["match"] == "document"
    assert summary["ks"] == [5]
    assert summary["metrics"]["recall@5"] == pytest.approx(2 / 3)
    assert summary["metrics"]["ndcg@5"] == pytest.approx(0.5)
    assert summary["metrics"]["token_f1"] == pytest.approx(0.75)
    assert summary["n_scored"] == {"recall@5": 3, "ndcg@5": 3, "token_f1": 2}
    assert summary["skipped"] == {"empty_answer": 1, "no_labels": 1}
    assert summary["errors"] == {"generation": {"TimeoutError": 1}}
    assert summary["latency_ms"]["retrieve"]["mean"] == pytest.approx(20.0)
    assert summary["latency_ms"]["retrieve"]["p50"] == pytest.approx(20.0)
    assert summary["cache"] == {"reused": 3}
    assert list(summary["metrics"]) == ["recall@5", "ndcg@5", "token_f1"]


def test_means_are_the_stats_means_without_a_bootstrap(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a study reads after every batch: the same means, never paying for intervals."""
    expected = {name: st.mean for name, st in _report().stats().items()}

    def no_bootstrap(*args: object, **kwargs: object) -> tuple[float, float]:
        raise AssertionError("means() must not bootstrap")

    monkeypatch.setattr(report_module.metric_stats, "bootstrap_ci", no_bootstrap)
    assert _report().means() == expected


def test_confidence_intervals_contain_the_mean() -> None:
    values = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0] * 10
    samples = [SampleRecord(f"q{i}", "q", metrics={"hit_rate@1": v}) for i, v in enumerate(values)]
    st = EvaluationReport(samples, ks=(1,), match_mode="document").stats()["hit_rate@1"]
    assert st.n == len(values)
    assert st.mean == pytest.approx(0.75)
    assert 0.0 <= st.ci_low < st.mean < st.ci_high <= 1.0
    # 80 binary samples at p=0.75: the normal-approximation half-width is about 0.095.
    assert 0.05 < (st.ci_high - st.ci_low) / 2 < 0.15
    assert st.std == pytest.approx(float(pd.Series(values).std()))


def test_constant_metric_has_a_degenerate_interval() -> None:
    samples = [SampleRecord(f"q{i}", "q", metrics={"mrr@3": 1.0}) for i in range(5)]
    st = EvaluationReport(samples, ks=(3,), match_mode="chunk").stats()["mrr@3"]
    assert (st.ci_low, st.mean, st.ci_high, st.std) == (1.0, 1.0, 1.0, 0.0)


def test_meta_cannot_shadow_summary_keys() -> None:
    with pytest.raises(ValueError, match="metrics"):
        EvaluationReport([], ks=(1,), match_mode="document", meta={"metrics": {}})


def test_error_rates_per_stage_and_skip_reason() -> None:
    rates = _report().error_rates()
    assert rates["n_samples"] == 4
    assert rates["failed"] == {"count": 1, "rate": 0.25}
    assert rates["errors"] == {"generation": {"TimeoutError": {"count": 1, "rate": 0.25}}}
    assert rates["skipped"] == {
        "answer": {"empty_answer": {"count": 1, "rate": 0.25}},
        "retrieval": {"no_labels": {"count": 1, "rate": 0.25}},
    }


def test_dataframe_has_one_row_per_sample_and_a_column_per_metric() -> None:
    df = _report().to_dataframe()
    assert df.shape[0] == 4
    assert {"question_id", "question", "retrieved_ids", "answer", "recall@5", "ndcg@5", "token_f1"} <= set(df)
    assert {"latency_retrieve_s", "skipped_answer", "skipped_retrieval", "error"} <= set(df)
    assert json.loads(str(df.loc[0, "retrieved_ids"])) == ["d1", "d2"]
    assert df["recall@5"].isna().tolist() == [False, False, False, True]
    assert df.loc[3, "error"] == "generation: TimeoutError: 30 s"


def test_save_writes_four_files_and_no_temporaries(tmp_path: Path) -> None:
    report = _report()
    out = report.save(tmp_path / "new" / "report")
    assert sorted(p.name for p in out.iterdir()) == [
        "error_rates.json",
        "samples.csv",
        "summary.json",
        "traces.jsonl",
    ]
    assert json.loads((out / "summary.json").read_text(encoding="utf-8")) == json.loads(report.summary_json())
    assert "سؤال" in (out / "traces.jsonl").read_text(encoding="utf-8")  # Arabic kept readable
    traces = [json.loads(line) for line in (out / "traces.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [t["question_id"] for t in traces] == ["q1", "q2", "q3", "q4"]
    assert traces[0]["retrieved"][0] == {"id": "d1", "score": 2.0, "doc_id": None, "text": "نص عربي"}
    assert traces[0]["latency"] == {"retrieve": 0.010}
    assert traces[3]["error"] == {"stage": "generation", "kind": "TimeoutError", "message": "30 s"}
    assert pd.read_csv(out / "samples.csv").shape == report.to_dataframe().shape
    assert json.loads((out / "error_rates.json").read_text(encoding="utf-8"))["failed"]["count"] == 1


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "summary.json").write_text("old", encoding="utf-8")

    def fail(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        _report().save(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]
    assert (tmp_path / "summary.json").read_text(encoding="utf-8") == "old"


def test_summary_json_is_strict_json() -> None:
    samples = [
        SampleRecord("q1", "q", metrics={"x": float("nan")}),  # NaN is no score: left out of the mean
        SampleRecord("q2", "q", metrics={"x": 1.0}),
    ]
    report = EvaluationReport(samples, ks=(1,), match_mode="document", meta={"cost": float("inf")})
    text = report.summary_json()
    assert "NaN" not in text and "Infinity" not in text
    summary = json.loads(text)
    assert summary["metrics"]["x"] == 1.0 and summary["n_scored"]["x"] == 1 and summary["cost"] is None


def test_render_shows_the_metric_by_k_grid() -> None:
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(render_report(_report()))
    text = console.export_text()
    assert "@5" in text
    assert "recall" in text and "0.667" in text
    assert "token_f1" in text and "0.750" in text
    assert "no_labels 1" in text and "empty_answer 1" in text


def _trace(sample: SampleRecord, texts: bool) -> dict[str, object]:
    """What a traces.jsonl line holds, from the sample's fields (the columns are written directly)."""
    return {
        "question_id": sample.question_id,
        "question": sample.question,
        "retrieved": [
            {"id": h.id, "score": h.score, "doc_id": h.doc_id, **({"text": h.text} if texts else {})}
            for h in sample.retrieved
        ],
        "answer": sample.answer,
        "metrics": {k: None if v is None or math.isnan(v) else v for k, v in sample.metrics.items()},
        "latency": sample.latency,
        "skipped": sample.skipped,
        "error": None if sample.error is None else vars(sample.error),
        "context_tokens": sample.context_tokens,
        "reasons": sample.reasons,
    }


@pytest.mark.parametrize("texts", [True, False])
def test_each_traces_line_is_its_sample_in_strict_json(texts: bool) -> None:
    samples = _samples()
    samples[0].reasons = {"faithfulness": "مدعوم"}
    samples[1].context_tokens = 12
    samples[1].metrics["ndcg@5"] = float("nan")  # not finite: null, never NaN
    report = EvaluationReport(samples, ks=(5,), match_mode="document")
    lines = artifacts.trace_lines(artifacts.Cells(report.table, artifacts.Memo()), texts=texts)
    assert len(lines) == len(samples) and all(line.endswith(b"\n") for line in lines)
    def refuse(constant: str) -> None:
        pytest.fail(f"{constant} in a traces line")

    for line, sample in zip(lines, report.samples, strict=True):
        assert json.loads(line, parse_constant=refuse) == _trace(sample, texts)
    assert json.loads(lines[1])["metrics"]["ndcg@5"] is None


def test_samples_csv_reads_back_cell_for_cell_with_commas_quotes_and_line_breaks() -> None:
    samples = _samples()
    samples[0].question = 'قال: "نعم، لا"\nثم سكت'
    samples[1].answer = "a,b\r\nc"
    samples[2].error = StageError("generation", "ValueError", 'bad "quote", here')
    report = EvaluationReport(samples, ks=(5,), match_mode="document")
    text = artifacts.samples_csv(artifacts.Cells(report.table, artifacts.Memo()))
    rows = list(csv.reader(io.StringIO(text.decode("utf-8"), newline="")))
    frame = report.to_dataframe()
    assert rows[0] == list(frame.columns)
    expected = [["" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v) for v in row]
                for row in frame.astype(object).itertuples(index=False)]
    assert rows[1:] == expected
    assert rows[1][1] == 'قال: "نعم، لا"\nثم سكت' and rows[2][3] == "a,b\r\nc"


def test_floats_are_written_as_python_writes_them() -> None:
    """orjson writes the floats, and the values it writes otherwise (under 1e-4, not finite) are corrected:
    every cell is the float's repr, ``missing`` where it is not finite."""
    values = np.array([0.1, 1e-05, 3.5e-07, -2.5e-05, 9.999e-05, 1e-04, 1e16, 1.2345678901234567e17, 0.0,
                       -0.0, 100.0, math.nan, math.inf, -math.inf, 5e-324, 0.1 + 0.2])
    cells = artifacts.FloatCells.of(values).cells(b"null").tolist()
    assert cells == [repr(v).encode() if math.isfinite(v) else b"null" for v in values.tolist()]
    assert artifacts.FloatCells.of(values).cells(b"").tolist()[11:14] == [b"", b"", b""]


def test_a_rankings_padding_is_left_out_of_every_file() -> None:
    """A question with fewer hits than k (padded in the ranking) lists only its hits, in traces.jsonl,
    samples.csv and the question table; its scores as repr."""
    table = ChunkTable(("a#0", "b#0", "c#0"), ("a", "b", "c"), ("alpha", "beta", 'g "q", x'), key="t")
    ranking = Ranking(("q1", "q2", "q3"), np.array([[0, 1], [2, -1], [-1, -1]]),
                      np.array([[0.9, 1e-05], [0.7, 0.0], [0.0, 0.0]]), table)
    sample_table = SampleTable(("q1", "q2", "q3"), ("one?", "two?", "three?"),
                               metrics={"recall@2": np.array([1.0, 0.0, math.nan])}, retrieved=ranking)
    cells = artifacts.Cells(sample_table, artifacts.Memo())
    lines = [json.loads(line) for line in artifacts.trace_lines(cells, texts=True)]
    assert [line["retrieved"] for line in lines] == [
        [{"id": "a#0", "score": 0.9, "doc_id": "a", "text": "alpha"},
         {"id": "b#0", "score": 1e-05, "doc_id": "b", "text": "beta"}],
        [{"id": "c#0", "score": 0.7, "doc_id": "c", "text": 'g "q", x'}],
        [],
    ]
    assert b'"score": 1e-05' in b"".join(artifacts.trace_lines(cells, texts=False))
    rows = list(csv.DictReader(io.StringIO(artifacts.samples_csv(cells).decode("utf-8"), newline="")))
    assert [json.loads(row["retrieved_ids"]) for row in rows] == [["a#0", "b#0"], ["c#0"], []]
    assert [row["recall@2"] for row in rows] == ["1.0", "0.0", ""]
    question_rows = json.loads(artifacts.question_table(cells, {"q1": {"expected_ids": ["a#0"]}}))["data"]
    assert [row[3] for row in question_rows] == [["c#0"], ["a#0", "b#0"], []]  # worst first, unscored last
