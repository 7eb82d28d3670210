"""Reopening an index reads what its build saved (``composer.pipeline.saved``): never the corpus, never
BM25's analysis, and it ranks exactly as the first open did."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import composer
from composer.data import Corpus, load_corpus
from composer.errors import ComposerError
from composer.index import Bm25Encoder
from composer.index.base import IndexDamaged
from composer.pipeline.pipeline import Pipeline
from composer.pipeline.workspace import Workspace

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arcd-sample" / "corpus.jsonl"
QUERIES = ["متى ولد جمال خاشقجي؟", "ما هي عاصمة المغرب؟", "من هو مؤسس الدولة العثمانية"]


def config(mode: str = "bm25", **retrieval: Any) -> dict[str, Any]:
    return {"retrieval": {"mode": mode, "k": 5, **retrieval}, "chunking": {"method": "paragraph"}}


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return load_corpus(SAMPLE)


def hits(pipe: Pipeline) -> list[list[tuple[str, float]]]:
    return [[(h.id, h.score) for h in pipe.search(q)] for q in QUERIES]


def close(pipe: Pipeline) -> None:
    """What a process exit does: the next pipeline gets a fresh workspace (no open index, no memo)."""
    pipe.workspace.close()


def forbid_corpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading, chunking or analysing the corpus fails the test."""

    def fail(*_: Any, **__: Any) -> Any:
        raise AssertionError("reopening read or analysed the corpus")

    monkeypatch.setattr("composer.data.load_corpus", fail)
    monkeypatch.setattr("composer.data.corpus.load_corpus", fail)
    monkeypatch.setattr("composer.pipeline.workspace.chunk_corpus", fail)
    monkeypatch.setattr(Bm25Encoder, "fit", fail)


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_reopen_needs_neither_corpus_nor_fit(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    first = composer.load_pipeline(config(mode), corpus, workdir=tmp_path)
    expected = hits(first)
    expected_answer = first.ask(QUERIES[0])
    close(first)

    forbid_corpus(monkeypatch)
    again = composer.load_pipeline(config(mode), workdir=tmp_path)  # config alone
    assert hits(again) == expected
    answer = again.ask(QUERIES[0])
    assert (answer.text, answer.citations) == (expected_answer.text, expected_answer.citations)
    assert again.universe() == first.universe()
    close(again)

    # Given the corpus (already loaded), the index is reopened from what was saved: no chunking, no fit.
    third = Pipeline.from_config(config(mode), workdir=tmp_path)
    info = third.index(corpus)
    assert info.reused and info.n_chunks == len(third.universe())
    assert hits(third) == expected
    close(third)


def test_collection_lost_is_refilled_from_the_saved_index(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = composer.load_pipeline(config(), corpus, workdir=tmp_path)
    expected = hits(first)
    close(first)
    shutil.rmtree(tmp_path / "qdrant")  # e.g. only the saved index was copied elsewhere

    forbid_corpus(monkeypatch)
    again = composer.load_pipeline(config(), workdir=tmp_path)
    assert hits(again) == expected
    close(again)


def test_reopen_without_an_index_names_what_is_missing(corpus: Corpus, tmp_path: Path) -> None:
    pipe = composer.load_pipeline(config(), workdir=tmp_path)
    with pytest.raises(ComposerError, match=r"no index for this config is saved under .*indexes.*"
                                            r"index a corpus first"):
        pipe.search(QUERIES[0])
    close(pipe)
    # Another chunking has no index either, though one for the default chunking exists.
    built = composer.load_pipeline(config(), corpus, workdir=tmp_path)
    close(built)
    fixed = {**config(), "chunking": {"method": "fixed_chars", "size": 300}}
    other = composer.load_pipeline(fixed, workdir=tmp_path)
    with pytest.raises(ComposerError, match=r"no index for this config.*fixed_chars"):
        other.search(QUERIES[0])
    close(other)


def test_damaged_saved_index(corpus: Corpus, tmp_path: Path) -> None:
    first = composer.load_pipeline(config(), corpus, workdir=tmp_path)
    expected = hits(first)
    close(first)
    (saved,) = (tmp_path / "indexes").iterdir()
    values = saved / "sparse.values.bin"
    values.write_bytes(values.read_bytes()[:-8])

    with pytest.raises(IndexDamaged, match=r"sparse\.values\.bin holds"):
        composer.load_pipeline(config(), workdir=tmp_path).search(QUERIES[0])
    Workspace.get(tmp_path).close()

    again = composer.load_pipeline(config(), corpus, workdir=tmp_path)  # the corpus at hand: rebuilt
    assert hits(again) == expected
    close(again)
    assert composer.load_pipeline(config(), workdir=tmp_path).search(QUERIES[0])  # and saved anew
