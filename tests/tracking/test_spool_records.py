"""The MLflow writer's spool holds data, never code: records round-trip through JSON and raw arrays, a
planted pickle is never unpickled, and files that are not the user's own (or are links) are not read."""

from __future__ import annotations

import math
import os
import pickle
import stat
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from ended_trials import ended_trial
from optuna.trial import FrozenTrial

from composer.data.columns import TextColumn
from composer.data.ranking import ChunkTable, Ranking
from composer.data.types import Hit
from composer.evaluation.report import EvaluationReport, SampleTable, StageError, concat_tables
from composer.summary import HeldOut, IndexCounts, ObjectiveSummary, StudyLog, StudySummary
from composer.tracking.spool import (
    ASIDE,
    MAGIC,
    OWNER_LOCK,
    RECORD,
    TABLES,
    Orphans,
    Refused,
    Spool,
    read_record,
)
from composer.tracking.trial import TrialArtifacts
from composer.tracking.writer import _write

TABLE = ChunkTable(
    ("a#0", "b#0", "c#0"), ("a", "b", "c"), ("نص أول", "متن دوم", "gamma text"), key="composer-test"
)


def batch(lo: int, hi: int) -> SampleTable:
    """Questions lo..hi scored as one batch, with everything a table can hold."""
    ids = tuple(f"q{i}" for i in range(lo, hi))
    rows = hi - lo
    return SampleTable(
        ids,
        tuple(f"ما السؤال {i}؟" for i in range(lo, hi)),
        metrics={"recall@1": np.array([1.0, np.nan, 0.0][:rows]), "token_f1": np.linspace(0, 1, rows)},
        latency={"retrieve": np.full(rows, 0.002)},
        context_tokens=np.arange(rows, dtype=np.float64),
        retrieved=Ranking(ids, np.array([[0, 1], [2, -1], [1, 0]][:rows]),
                          np.array([[0.9, 0.5], [0.7, 0.0], [0.4, 0.3]][:rows]), TABLE),
        answers=["جواب \ud800 half a pair", None, "answer"][:rows],
        skipped={"answer": [None, "refusal", None][:rows]},
        errors={1: StageError("generation", "TimeoutError", "timed out")} if rows > 1 else {},
        reasons={0: {"faithfulness": "grounded in a#0"}},
    )


def trial_log(table: SampleTable) -> tuple[FrozenTrial, TrialArtifacts]:
    return ended_trial(
        7,
        {"retrieval": {"mode": "hybrid", "k": 2, "weights": [0.5, 0.5]}, "$": "a user's key", "": None},
        metrics={"composite": 0.5, "recall@1": 1.0, "latency_ms": 2},
        started=datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=timezone(timedelta(hours=3, minutes=30))),
        steps=[0.25, 0.5],
        system_attrs={"composer.worker": "host|boot|ns:42:7"},
        report=EvaluationReport(table, (1, 2), "document", {"questions": "q.jsonl", "llm": {"calls": 3}}),
        answerer="openai/gpt-4o-mini",
        judge_model="judge-model",
        error_rates={"generation": {"TimeoutError": {"count": 1, "rate": 0.5}}},
        generation={"q0": {"model": "m", "tokens": 12, "cache": True}, "$": {"odd": "question id"}},
    )


def assert_same_log(back: Any, log: tuple[FrozenTrial, TrialArtifacts]) -> None:
    assert (isinstance(back, tuple) and isinstance(back[0], FrozenTrial)
            and isinstance(back[1], TrialArtifacts))
    assert back[0] == log[0]  # Optuna's own frozen trial: state, values, times, attributes, steps
    report, original = back[1], log[1]
    assert replace(report, report=None) == replace(original, report=None)
    assert report.report is not None and original.report is not None
    assert (report.report.ks, report.report.match_mode, report.report.meta) == (
        original.report.ks, original.report.match_mode, original.report.meta)
    assert report.report.samples == original.report.samples  # ids, questions, hits, answers, scores...
    table, first = report.report.table, original.report.table
    assert table.question_ids == first.question_ids and table.questions == first.questions
    for name, column in first.metrics.items():
        np.testing.assert_array_equal(table.metrics[name], column)
        assert table.metrics[name].flags.writeable
    assert table.errors == first.errors and table.reasons == first.reasons


def test_a_trial_record_round_trips_as_data(tmp_path: Path) -> None:
    """Every field comes back equal: tuples, NaN, a time zone, a lone surrogate, keys that look like the
    format's tags; the ranking stays a Ranking over the chunk table, which is spooled once by key."""
    spool = Spool(tmp_path / "spool")
    log = trial_log(batch(0, 3))
    path = spool.put("trial", log)
    assert path.suffix == RECORD and path.read_bytes().startswith(MAGIC)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # the questions and answers: the user's only
    back = read_record(path, spool.tables, {})
    assert_same_log(back, log)
    report = back[1].report
    assert report is not None and isinstance(report.table.retrieved, Ranking)
    assert isinstance(report.table.retrieved.table.texts, TextColumn)  # mapped, not loaded
    assert list(report.table.retrieved.table.texts) == list(TABLE.texts)
    assert math.isnan(report.table.metrics["recall@1"][1])
    assert [p.name for p in (spool.root / TABLES).iterdir()] == ["composer-test"]


def test_batched_hits_a_lost_list_and_a_study_record_round_trip(tmp_path: Path) -> None:
    """Batches joined (their hits as lists, as an LLM study scores them), the lost trials (frozen) and the
    study's leaderboard, charts and summary."""
    spool = Spool(tmp_path / "spool")
    table = concat_tables([batch(0, 3), batch(3, 5)])
    assert not isinstance(table.retrieved, Ranking)
    table.retrieved[1].append(Hit("x", 0.1, None, None))  # a hit without text or document
    log = trial_log(table)
    assert_same_log(read_record(spool.put("trial", log), spool.tables, {}), log)

    lost = [(ended_trial(3, {"k": 2}, "FAIL")[0], "process died"),
            (ended_trial(4, {}, "FAIL")[0], "never ran")]
    assert read_record(spool.put("lost", lost), spool.tables, {}) == lost

    board = pd.DataFrame({
        "trial": [2, 0], "state": pd.array(["COMPLETE", "FAIL"], dtype="str"), "composite": [0.9, np.nan],
        "token_f1": [None, None], "duplicate_of": [np.nan, 2.0], "config": ["mode=bm25", "mode=dense"],
    })
    plots = {"history": b"\x89PNG\0"}
    study = StudyLog(study_summary(2, 0.9), board, plots)
    back = read_record(spool.put("study", study), spool.tables, {})
    assert isinstance(back, StudyLog) and back.summary == study.summary and back.plots == plots
    assert isinstance(back.summary.held_out, HeldOut) and back.summary.held_out.difference is not None
    pd.testing.assert_frame_equal(back.leaderboard, board)


HELD_OUT = {
    "n_questions": 12,
    "winner": {"trial": 2, "selection_composite": 0.9, "held_out_composite": 0.8},
    "runner_up": {"trial": 0, "selection_composite": 0.85, "held_out_composite": 0.7},
    "difference": {"mean": 0.1, "ci95": [0.02, 0.18], "n_paired": 12, "winner_really_better": True,
                   "runner_up_really_better": False},
}
"""A study's ``held_out`` user attribute as earlier versions stored it."""


def study_summary(
    best: int | None, value: float | None = 0.5, held: dict[str, Any] | None = None, seconds: float = 1.5
) -> StudySummary:
    """A study's summary with ``best`` as its best trial, re-scored on held-out questions as ``held``."""
    return StudySummary(
        study="s", storage="sqlite:///optuna.db", n_trials=3, n_complete=2, n_pruned=1, n_failed=0,
        best_trial=best, best_value=value, best_metrics=None if best is None else {"ndcg@10": 0.9},
        best_config=None if best is None else {"retrieval": {"k": 3}},
        objective=ObjectiveSummary(10, {"ndcg@10": 1.0}, {"ndcg@10": 1.0}, ["a note"], []),
        encode=IndexCounts(2, 1, 1, 1, 1, 40, 1),
        llm_usage=None, errors=[], held_out=HeldOut.from_dict(HELD_OUT if held is None else held),
        data={"corpus_fingerprint": "abc"}, seconds=seconds,
    )


@pytest.mark.parametrize("held", [
    HELD_OUT,
    {"n_questions": 12, "error": "re-scoring trial #0 failed: RuntimeError: boom",
     "winner": HELD_OUT["winner"]},
    {"n_questions": 12, "error": "re-scoring trial #2 failed: RuntimeError: boom"},
])
def test_a_stored_held_out_re_score_reads_back_and_is_stored_the_same(held: dict[str, Any]) -> None:
    """Studies store their held-out re-score as JSON in an Optuna user attribute: the typed value reads
    those of earlier versions and writes the very same JSON, key order included."""
    typed = HeldOut.from_dict(held)
    assert typed is not None and typed.to_dict() == held
    assert list(typed.to_dict()) == list(held)
    assert HeldOut.from_dict(None) is None


def test_the_summary_gives_the_parent_runs_json_and_its_headline_metrics() -> None:
    """``study_summary.json`` and the parent run's metrics, as the dict the study built before."""
    summary = study_summary(2, 0.9)
    as_json = summary.to_dict()
    assert list(as_json) == [
        "study", "storage", "n_trials", "n_complete", "n_pruned", "n_failed", "best_trial", "best_value",
        "best_metrics", "best_config", "objective", "encode", "llm_usage", "errors", "held_out", "data",
        "seconds", "selection", "judge_agreement", "llm_by_purpose", "llm_estimate",
    ]
    assert as_json["held_out"] == HELD_OUT and as_json["encode"]["embeddings_computed"] == 40
    assert summary.metrics() == {
        "COMPLETE": 2.0, "PRUNED": 1.0, "FAIL": 0.0, "trials_indexed": 2.0, "unique_index_keys": 1.0,
        "index_builds": 1.0, "encode_passes": 1.0, "index_reuses": 1.0, "embeddings_computed": 40.0,
        "repeats_skipped": 1.0, "best_value": 0.9, "best_trial": 2.0, "held_out_difference": 0.1,
        "seconds": 1.5,
    }


class Planted:
    """What a pickle planted in a work dir would do when unpickled: create ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def plant(spool: Path, name: str, marker: Path) -> Path:
    """A dead tracker's folder in ``spool`` holding a malicious pickle named ``name``."""
    folder = spool / "deadhost-4242-abcdef"
    folder.mkdir(parents=True)
    (spool / f"{folder.name}{OWNER_LOCK}").touch()
    path = folder / name
    path.write_bytes(pickle.dumps(Planted(marker)))
    return path


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_pickle_planted_in_a_studys_spool_never_runs(tmp_path: Path) -> None:
    """``composer optimize`` finds a dead tracker's folder with a pickle in it: the pickle is not loaded (the
    marker its ``__reduce__`` would create does not exist), the user is told which file and why, and the file
    is moved aside, so no later run reads it again."""
    from sample_study import write_experiment

    dims = {"retrieval.mode": {"choices": ["bm25"]}, "retrieval.k": {"choices": [3]}}
    exp_file = write_experiment(tmp_path, dims=dims, n_trials=1, workdir=str(tmp_path / "work"))
    marker = tmp_path / "PWNED"
    spool = tmp_path / "work" / "spool" / "s"
    planted = plant(spool, "000001-trial.pkl", marker)
    disguised = planted.with_name(f"000002-trial{RECORD}")  # a pickle under the new name
    disguised.write_bytes(planted.read_bytes())
    composer = str(Path(sys.executable).with_name("composer"))
    proc = subprocess.run([composer, "optimize", str(exp_file)], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "COLUMNS": "300"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not marker.exists()
    output = " ".join((proc.stdout + proc.stderr).split())
    assert f"{planted} is not read (a pickled record, from an older Composer version or an untrusted source" \
        in output
    assert f"{disguised} is not read (ValueError: not a spool record of this Composer version)" in output
    assert all(p.with_name(p.name + ASIDE).exists() for p in (planted, disguised))
    assert Orphans(spool).files == []


def test_a_spool_file_that_is_a_link_is_not_read(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    record = spool.put("trial", trial_log(batch(0, 1)))
    link = record.with_name(f"000002-trial{RECORD}")
    link.symlink_to(record)
    with pytest.raises(Refused, match="a symbolic link"):
        read_record(link, spool.tables, {})
    failure = _write(None, link, spool.tables, {}, 0)
    assert failure == f"{link} is not read (a symbolic link); left as it is" and link.is_symlink()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to give files away")
def test_spool_files_of_another_user_are_refused_and_left_alone(tmp_path: Path) -> None:
    """A dead tracker's record owned by another user is not read and not deleted, and said once: its folder
    is no orphan afterwards. A folder, or a chunk table, of another user's is refused the same way."""
    root = tmp_path / "spool"
    dead = Spool(root)
    record = dead.put("trial", trial_log(batch(0, 2)))
    dead._lock.release()  # the tracker died
    os.chown(record, 12345, 12345)
    left = Orphans(root)
    assert left.files == [record] and left.refused == []
    failure = _write(None, record, root / TABLES, {}, 0)
    assert failure == f"{record} is not read (owned by another user, uid 12345); left as it is"
    left.release()
    assert record.exists() and record.stat().st_uid == 12345
    assert Orphans(root).files == [] and Orphans(root).refused == []  # never retried

    other = Spool(root)
    other._lock.release()
    os.chown(other.owner, 12345, 12345)
    refused = f"{other.owner} is not read (owned by another user, uid 12345); left as it is"
    assert Orphans(root).refused == [refused]

    mine = Spool(root).put("trial", trial_log(batch(0, 2)))
    os.chown(root / TABLES / "composer-test" / "texts", 12345, 12345)
    with pytest.raises(Refused, match="owned by another user"):
        read_record(mine, root / TABLES, {})


def test_a_spool_file_removed_while_its_orphan_folder_is_released_is_nothing_to_refuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from composer.tracking import spool as spool_module

    root = tmp_path / "spool"
    dead = Spool(root)
    record = dead.put("trial", trial_log(batch(0, 2)))
    dead._lock.release()  # the tracker died
    left = Orphans(root)
    assert left.files == [record]
    real_refusal = spool_module.refusal

    def removed_first(path: Path) -> str | None:  # the file goes between the listing and its check
        path.unlink(missing_ok=True)
        return real_refusal(path)

    monkeypatch.setattr(spool_module, "refusal", removed_first)
    left.release()  # raised FileNotFoundError, and the writer died
    monkeypatch.undo()
    again = Orphans(root)  # the locks were let go: the next writer takes the folder, finds nothing, drops it
    assert again.files == [] and again.refused == []
    again.release()
    assert not dead.owner.exists()


def test_names_in_a_record_never_make_paths_outside_their_folder(tmp_path: Path) -> None:
    """A record is data, and so are the names in it: a chunk table's key (a file under the parent run's
    chunks/) and a chart's name (plots/<name>.png) are plain file names or the record is refused."""
    from writer_logs import writer_for

    from composer.tracking.spool import _Decoder

    decode = _Decoder(memoryview(b""), tmp_path / "tables", {})
    for key in ("../../escaped", "/abs/escaped", ".hidden"):
        with pytest.raises(ValueError, match="chunk table"):
            decode({"$": "chunk-table", "key": key})
        with pytest.raises(ValueError, match="inline"):  # a keyed table is never rebuilt from the record
            decode({"$": "ChunkTable", "ids": [], "doc_ids": [], "texts": [], "key": key})
    writer = writer_for(tmp_path / "work")
    board = pd.DataFrame({"trial": [0], "state": ["COMPLETE"], "composite": [0.5]})
    for name in ("../../escaped", "/abs/escaped"):
        with pytest.raises(ValueError, match="a chart named"):
            writer.write_study(study_summary(None), board, {name: b"png"})
    assert not list(tmp_path.rglob("escaped*"))


def test_values_a_record_has_no_type_for_are_kept_as_text_never_failing_the_trial(tmp_path: Path) -> None:
    """A user's system may put anything in what a trial records (a path, a set, an object): the record is
    what MLflow shows, so such a value is written as its text (or its items), and the trial is recorded."""

    class Opaque:
        def __str__(self) -> str:
            return "opaque value"

    spool = Spool(tmp_path / "spool")
    lost = [(3, {"where": Path("/data/x"), "tags": {"b"}, "obj": Opaque(),
                 "objects": np.array([Opaque(), 1], dtype=object)}, "why")]
    back = read_record(spool.put("lost", lost), spool.tables, {})
    assert back == [(3, {"where": "/data/x", "tags": ["b"], "obj": "opaque value",
                         "objects": ["opaque value", 1]}, "why")]
