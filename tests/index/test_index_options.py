"""BM25 index options end to end through the pipeline: the title field, reopened collections, and sentence
windows (small chunks indexed, the window around them returned)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from composer.chunking import chunk_corpus
from composer.chunking.config import ChunkingConfig
from composer.data import Corpus, Document
from composer.pipeline.pipeline import Pipeline
from composer.pipeline.workspace import Workspace

TITLED = Corpus(
    [
        Document("nile", "يمر النهر بمصر والسودان ويصب في البحر المتوسط.", title="نهر النيل"),
        Document(
            "farming",
            "تعتمد الزراعة على مياه النيل منذ القدم وتزرع على ضفافه محاصيل كثيرة ومتنوعة في القرى.",
            title="الزراعة في مصر",
        ),
        Document("desert", "تغطي الصحراء الكبرى معظم شمال أفريقيا.", title="الصحراء الكبرى"),
    ],
    source="titled",
)


def bm25(workdir: Path, chunking: dict[str, Any] | None = None, **retrieval: Any) -> Pipeline:
    config = {"retrieval": {"mode": "bm25", "k": 3, **retrieval}, "chunking": chunking or {}}
    return Pipeline.from_config(config, workdir=workdir)


def test_a_title_naming_the_subject_outranks_a_passing_mention(tmp_path: Path) -> None:
    text_only = bm25(tmp_path)
    text_only.index(TITLED)
    assert [h.doc_id for h in text_only.search("النيل")] == ["farming"], "only the farming text says النيل"

    titled = bm25(tmp_path, title_weight=2.0)
    titled.index(TITLED)
    assert titled.key != text_only.key
    hits = titled.search("النيل")
    assert [h.doc_id for h in hits] == ["nile", "farming"]
    assert hits[0].text == TITLED.documents[0].text, "the title is searched, never returned"


def test_a_reopened_collection_scores_like_the_new_one(tmp_path: Path) -> None:
    options = {"analyzer": "isri", "title_weight": 1.5, "k1": 0.9, "b": 0.4, "stopwords": False}
    first = bm25(tmp_path, **options)
    assert not first.index(TITLED).reused
    before = first.search("أين يصب نهر النيل")
    first.workspace.close()  # a new process: the collection is opened from disk, its vectors rebuilt

    again = bm25(tmp_path, **options)
    assert again.index(TITLED).reused
    after = again.search("أين يصب نهر النيل")
    assert [(h.id, h.score) for h in after] == [(h.id, pytest.approx(h.score, rel=1e-12)) for h in before]
    Workspace.get(tmp_path).close()


# Four sentences of 30-45 characters: at size 50 each is a chunk of its own.
S = [
    "ولد الشاعر في حي قديم من أحياء القاهرة.",
    "درس الأدب الفرنسي سنوات طويلة في باريس.",
    "كتب أشهر قصائده عن النيل بعد عودته.",
    "توفي في الإسكندرية وهو في السبعين.",
]
SENTENCES = Document("d", " ".join(S))


def test_sentence_windows_index_the_sentence_and_return_its_neighbours(tmp_path: Path) -> None:
    plain_cfg = ChunkingConfig(method="sentence", size=50)
    window_cfg = ChunkingConfig(method="sentence", size=50, window=1)
    plain, windows = (chunk_corpus(Corpus([SENTENCES]), cfg) for cfg in (plain_cfg, window_cfg))
    assert len(plain) == len(windows) == 4
    for small, windowed in zip(plain, windows, strict=True):
        assert windowed.id == small.id and windowed.index == small.index, "ids do not depend on the window"
        assert windowed.indexed == (small.start, small.end) and windowed.indexed_text == small.text
        assert windowed.text == SENTENCES.text[windowed.start : windowed.end]
    assert [c.text for c in plain] == S
    assert windows[0].text == " ".join(S[:2]), "the first sentence has no left side"
    assert windows[2].text == " ".join(S[1:])

    pipeline = bm25(tmp_path, chunking={"method": "sentence", "size": 50, "window": 1})
    pipeline.index(Corpus([SENTENCES]))
    hits = pipeline.search("قصائد عن النيل")
    # Only the sentence that says it matches, though two other windows show it; its hit returns the window.
    assert [(h.id, h.text) for h in hits] == [("d#2", windows[2].text)]
    assert pipeline.universe()["d#1"] == ("d", windows[1].text)
