"""Indexes shared by several processes. Qdrant Edge on one workdir: one process uses a collection's shared
directory, the others build a private copy, and private copies never outlive their process. A Qdrant
server: a worker whose build another worker replaced never marks the replacement complete."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from composer.chunking import Chunk
from composer.errors import ComposerError
from composer.index import Bm25Encoder, ClientBackend, EdgeBackend
from composer.index.base import point_id
from composer.index.edge import WORKERS_DIR

TEXTS = ["القطط حيوانات أليفة", "الأسود تعيش في السافانا", "الطيور تهاجر في الشتاء", "النهر يجري نحو البحر"]
QUERIES = ["القطط", "الطيور الشتاء", "البحر"]

# Run in a child process: open the root, build "books" unless it exists, search, report as JSON.
CHILD = textwrap.dedent(
    """
    import json, os, sys
    from composer.chunking import Chunk
    from composer.index import Bm25Encoder, EdgeBackend
    root, texts, queries, how = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
    backend = EdgeBackend(root)
    reused = backend.exists("books")
    encoder, sparse = Bm25Encoder.fit(texts)
    if not reused:
        chunks = [Chunk(id=f"d{i}#0", doc_id=f"d{i}", text=t, start=0, end=len(t), index=0)
                  for i, t in enumerate(texts)]
        backend.create("books", None, {"bm25": encoder.to_dict()})
        backend.upsert("books", chunks, None, sparse)
        backend.finish("books")
    hits = backend.search_bm25("books", encoder.encode_queries(queries), 2)
    home = str(backend._shard_path("books").parent)
    print(json.dumps({"reused": reused, "home": home, "hits": [[pid for pid, _ in q] for q in hits]}))
    sys.stdout.flush()
    if how == "crash":
        os._exit(0)  # no atexit: what a killed process leaves behind
    """
)


def child(root: Path, how: str = "exit") -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), json.dumps(TEXTS), json.dumps(QUERIES), how],
        capture_output=True, text=True, timeout=120, check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def build(backend: EdgeBackend) -> list[list[str]]:
    encoder, sparse = Bm25Encoder.fit(TEXTS)
    chunks = [Chunk(id=f"d{i}#0", doc_id=f"d{i}", text=t, start=0, end=len(t), index=0)
              for i, t in enumerate(TEXTS)]
    backend.create("books", None, {"bm25": encoder.to_dict()})
    backend.upsert("books", chunks, None, sparse)
    backend.finish("books")
    return [[pid for pid, _ in q] for q in backend.search_bm25("books", encoder.encode_queries(QUERIES), 2)]


def private_roots(root: Path) -> list[Path]:
    base = root / WORKERS_DIR
    return sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []


def test_a_second_process_builds_a_private_copy_while_the_shared_index_is_in_use(tmp_path: Path) -> None:
    root = tmp_path / "qdrant"
    owner = EdgeBackend(root)
    expected = build(owner)
    assert expected[0][0] == point_id("d0#0") and expected[1][0] == point_id("d2#0")
    assert (root / "books" / "meta.json").is_file()

    other = child(root)
    # The shared shard is open here, so the child could not use it: it built and searched its own copy,
    # with the same results, and removed the copy when it exited.
    assert other["reused"] is False
    assert Path(str(other["home"])).parent.parent == (root / WORKERS_DIR).resolve()
    assert other["hits"] == expected
    assert private_roots(root) == []
    # The shared index was left alone and still answers here.
    assert owner.exists("books") and owner.count("books") == len(TEXTS)

    owner.close()
    after = child(root)
    assert after == {"reused": True, "home": str((root / "books").resolve()), "hits": expected}


def test_private_copies_of_a_dead_process_are_swept(tmp_path: Path) -> None:
    root = tmp_path / "qdrant"
    owner = EdgeBackend(root)
    build(owner)
    crashed = child(root, how="crash")
    leftover = Path(str(crashed["home"])).parent
    assert crashed["reused"] is False and leftover.is_dir()  # os._exit skipped the cleanup

    survivor = child(root)  # needs a private root too: sweeps the dead one's first
    assert survivor["reused"] is False and survivor["hits"] == crashed["hits"]
    assert not leftover.exists()
    assert private_roots(root) == []
    assert list((root / WORKERS_DIR).glob("*.lock")) == []
    owner.close()


def test_one_process_reuses_its_private_copy_and_close_removes_it(tmp_path: Path) -> None:
    """Within one process the copy is reused across pipelines; close() hands everything back."""
    from composer.locks import FileLock

    root = (tmp_path / "qdrant").resolve()
    root.mkdir()
    holder = FileLock(root / "books.lock")  # stands for another process: a second open file's lock
    assert holder.acquire(blocking=False)
    backend = EdgeBackend(root)
    assert not backend.exists("books")
    expected = build(backend)
    assert not (root / "books").exists()
    [copy] = private_roots(root)
    assert EdgeBackend(root).exists("books")  # another backend of this process finds the copy
    backend.close()
    assert not copy.exists() and private_roots(root) == []
    holder.release()
    assert EdgeBackend(root).exists("books") is False  # the shared one was never built
    assert build(EdgeBackend(root)) == expected
    assert (root / "books" / "meta.json").is_file()
    EdgeBackend(root).close()


def test_a_server_build_replaced_by_another_worker_is_not_marked_complete() -> None:
    """Two workers start the same new collection on one server: the second's create drops the first's
    build. The first must not then mark the second's half-filled collection complete."""
    first = ClientBackend(":memory:")
    second = ClientBackend(":memory:")
    second.client = first.client  # one server, two workers
    chunks = [Chunk(id=f"d{i}#0", doc_id=f"d{i}", text=t, start=0, end=len(t), index=0)
              for i, t in enumerate(TEXTS)]
    vectors = np.eye(len(TEXTS), 4, dtype=np.float32)
    first.create("shared", 4, {"n": 4})
    first.upsert("shared", chunks, vectors, None)
    second.create("shared", 4, {"n": 4})  # saw it incomplete: rebuilds from scratch
    second.upsert("shared", chunks[:1], vectors[:1], None)
    with pytest.raises(ComposerError, match="rebuilt by another worker"):
        first.finish("shared")
    assert not second.exists("shared")  # still the second's unfinished build
    second.upsert("shared", chunks[1:], vectors[1:], None)
    second.finish("shared")
    assert first.exists("shared") and first.count("shared") == len(TEXTS)
    first.close()


PIPELINE_CHILD = textwrap.dedent(
    """
    import json, sys
    from composer.data import load_corpus
    from composer.pipeline.pipeline import Pipeline
    from composer.data.types import Question
    workdir, corpus_path, config = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    pipeline = Pipeline.from_config(config, workdir=workdir)
    info = pipeline.index(load_corpus(corpus_path))
    run = pipeline.retrieve([Question(id="q", question="cats and lions")])
    print(json.dumps({"reused": info.reused, "computed": info.embeddings_computed,
                      "cached": info.embeddings_reused, "hits": [h.id for h in run["q"]]}))
    """
)


def test_a_private_copy_is_built_from_the_saved_index(tmp_path: Path) -> None:
    """The second process pays an upsert for its copy, never an encode: the vectors come from what the
    first build saved (composer.pipeline.saved), not even from the embedding cache."""
    from composer.data import load_corpus
    from composer.data.types import Question
    from composer.pipeline.pipeline import Pipeline

    corpus_path = tmp_path / "corpus.jsonl"
    docs = ["Cats are small pets.", "Lions live in the savanna.", "Birds migrate in winter.",
            "Rivers flow to the sea."]
    corpus_path.write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(docs)),
                           encoding="utf-8")
    config = {"embedding": {"provider": "minilm"}, "retrieval": {"mode": "dense", "k": 2}}
    workdir = tmp_path / "work"
    here = Pipeline.from_config(config, workdir=workdir)
    info = here.index(load_corpus(corpus_path))
    assert info.embeddings_computed == len(docs) and not info.reused
    expected = [h.id for h in here.retrieve([Question(id="q", question="cats and lions")])["q"]]

    out = subprocess.run([sys.executable, "-c", PIPELINE_CHILD, str(workdir), str(corpus_path),
                          json.dumps(config)], capture_output=True, text=True, timeout=300, check=True)
    other = json.loads(out.stdout.strip().splitlines()[-1])
    # This process holds the shared index open: the child built its own copy, from saved vectors only.
    assert other == {"reused": False, "computed": 0, "cached": 0, "hits": expected}
    assert private_roots(workdir / "qdrant") == []
    here.workspace.close()
