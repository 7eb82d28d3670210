"""`composer label` reads the passages of a trial's hits from the index itself, whichever study built it
(issue 42): two studies in one work dir, the second reusing the first's index, and the second's sheet
has every passage."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from fake_llm_server import FakeLLMServer
from sample_study import SAMPLE, write_experiment
from scripted_llm import ScriptedRAG
from typer.testing import CliRunner

from composer.calibration.sheet import labelling_sheet
from composer.chunking import Chunk
from composer.cli.app import app
from composer.data import load_questions
from composer.index.bm25 import SparseVector
from composer.index.client import ClientBackend
from composer.study.experiment import load_experiment

ONE_TRIAL = {"retrieval.mode": {"choices": ["bm25"]}, "retrieval.k": {"choices": [3]},
             "generation.template": {"choices": ["concise"]}}


@pytest.mark.slow
def test_a_second_study_reusing_the_index_writes_a_sheet_with_passages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    golds = {q.question: q.gold_answers[0] for q in load_questions(SAMPLE / "questions.jsonl")}
    with FakeLLMServer(ScriptedRAG(golds)) as server:
        common = {"dims": ONE_TRIAL, "n_questions": 4, "sampler": {"name": "grid", "seed": None},
                  "objective": {"k": 3, "metrics": {"recall": 1, "faithfulness": 1}},
                  "llm": {"model": "openai/fake", "api_base": server.url, "timeout": 5},
                  "judge": {"metrics": ["faithfulness"]}}
        for name in ("first", "second"):  # one work dir, one index key: the second study reuses it
            exp_file = write_experiment(tmp_path, name=name, file=f"{name}.yaml", **common)
            result = CliRunner().invoke(app, ["optimize", str(exp_file)])
            assert result.exit_code == 0, result.output
    out = tmp_path / "sheet"
    result = CliRunner().invoke(app, ["label", "second", "-e", str(exp_file), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "lack" not in result.output, result.output  # issue 42: "4 answers lack their passages"
    rows = list(csv.DictReader(io.StringIO((out / "labels.csv").read_text(encoding="utf-8-sig"))))
    assert len(rows) == 4 and all(1 <= len(json.loads(r["contexts"])) <= 3 for r in rows)

    download = MlflowClient.download_artifacts

    def no_chunks(self: MlflowClient, run_id: str, path: str, dst_path: str | None = None) -> str:
        if path.startswith("chunks/"):  # the second study's run holds no texts of the index it reused
            raise MlflowException(f"no artifact {path}")
        return download(self, run_id, path, dst_path)

    monkeypatch.setattr(MlflowClient, "download_artifacts", no_chunks)
    exp = load_experiment(exp_file)
    sheet = labelling_sheet(exp, "second")  # read from the first study's build, saved in the work dir
    passages = [json.loads(r["contexts"]) for r in rows]
    assert sheet.missing_contexts == 0 and [list(r.contexts) for r in sheet.rows] == passages

    # An index on a Qdrant server, with no saved copy here: its points hold the texts.
    (key,) = [p.name for p in (exp.work_dir / "indexes").iterdir() if not p.name.startswith(".")]
    server = _server_index(key, exp.work_dir / "indexes" / key / "chunks.json")
    monkeypatch.setattr("composer.pipeline.saved.SAVED_DIR", "no-such-folder")
    monkeypatch.setattr("composer.index.open_index", lambda location, workdir: server)
    on_server = exp.model_copy(update={"qdrant": "http://127.0.0.1:6333"})
    sheet = labelling_sheet(on_server, "second")
    assert sheet.missing_contexts == 0 and [list(r.contexts) for r in sheet.rows] == passages
    assert labelling_sheet(exp, "second").missing_contexts == 4  # on Qdrant Edge, nothing else holds them


def _server_index(key: str, saved: Path) -> ClientBackend:
    """An in-memory qdrant-client collection ``key`` holding the saved index's chunks, as a server's
    does (their texts in the points' payload)."""
    columns = json.loads(saved.read_text(encoding="utf-8"))
    chunks = [Chunk(**{name: values[i] for name, values in columns.items()})
              for i in range(len(columns["id"]))]
    backend = ClientBackend(":memory:")
    backend.create(key, None, {})
    backend.upsert(key, chunks, None, [SparseVector([1], [1.0])] * len(chunks))
    backend.finish(key)
    return backend
