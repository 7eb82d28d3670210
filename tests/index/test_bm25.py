"""BM25 sparse encoding: its weights, its persisted statistics, and its quality on ARCD via Qdrant Edge."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from composer.chunking import Chunk
from composer.index import Bm25Encoder, EdgeBackend
from composer.index.base import point_id
from composer.index.bm25 import SCHEME, SparseVector, token_id
from composer.metrics.retrieval import hit_rate, relevance


def test_document_weights_follow_bm25_saturation_and_length_norm() -> None:
    encoder, (short, long) = Bm25Encoder.fit(
        ["nile nile egypt", "nile delta cairo river sea port"], stem=False
    )
    assert encoder.avglen == 4.5 and encoder.n_docs == 2
    k1, b = 1.2, 0.75

    def weight(tf: int, length: int) -> float:
        return tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / 4.5))

    short_w = dict(zip(short.indices, short.values, strict=True))
    assert short_w[token_id("nile")] == pytest.approx(weight(2, 3))
    assert short_w[token_id("egypt")] == pytest.approx(weight(1, 3))
    long_w = dict(zip(long.indices, long.values, strict=True))
    assert long_w[token_id("nile")] == pytest.approx(weight(1, 6))
    assert long_w[token_id("nile")] < short_w[token_id("egypt")], "longer documents weigh a match less"
    assert short.indices == sorted(short.indices) and len(set(long.indices)) == 6


def test_queries_weigh_each_distinct_token_once() -> None:
    encoder, _ = Bm25Encoder.fit(["anything here"])
    (q,) = encoder.encode_queries(["river river delta the"])
    assert sorted(q.indices) == sorted({token_id("river"), token_id("delta")})
    assert q.values == [1.0, 1.0]


def test_stemming_and_stopwords_apply_per_detected_language() -> None:
    stemmed, _ = Bm25Encoder.fit(["x"], stem=True)
    plain, _ = Bm25Encoder.fit(["x"], stem=False)
    assert stemmed.tokens("المكتبات والكتب في المدينة") != plain.tokens("المكتبات والكتب في المدينة")
    assert "في" not in plain.tokens("المكتبات والكتب في المدينة")
    # Snowball has no Persian stemmer: Persian tokens are not stemmed even with stem=True, but ZWNJ cuts
    # words, so the plural suffix is a token of its own (a stopword).
    assert (
        stemmed.tokens("کتابخانه‌های دانشگاه")
        == plain.tokens("کتابخانه‌های دانشگاه")
        == ["کتابخانه", "دانشگاه"]
    )


def test_persian_and_arabic_letter_forms_share_token_ids() -> None:
    assert token_id("كتاب") == token_id("کتاب")
    assert token_id("فارسي") == token_id("فارسی")
    assert token_id("کتاب") != token_id("کتب")


def test_stats_round_trip_and_refuse_other_schemes() -> None:
    encoder, _ = Bm25Encoder.fit(["a b c", "d e"], stem=False, k1=1.5, b=0.5)
    data = json.loads(json.dumps(encoder.to_dict()))
    assert data["scheme"] == SCHEME
    assert Bm25Encoder.from_dict(data) == encoder
    with pytest.raises(ValueError, match="scheme"):
        Bm25Encoder.from_dict({**data, "scheme": "composer-bm25/v0"})


def test_empty_text_encodes_to_empty_vector() -> None:
    encoder, (vec,) = Bm25Encoder.fit([""])
    assert vec.indices == [] and vec.values == []
    assert encoder.avglen == 1.0
    assert encoder.encode_queries(["؟ ، ."])[0].indices == []


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_arcd_document_level_hit_at_5(arcd_dir: Path, tmp_path: Path) -> None:
    """The issue's bar: BM25 on ARCD reaches hit_rate@5 >= 0.88 (0.907 measured with this recipe)."""
    docs = read_jsonl(arcd_dir / "corpus.jsonl")
    questions = read_jsonl(arcd_dir / "questions.jsonl")
    assert len(docs) == 460 and len(questions) == 1395
    chunks = [Chunk(d["id"], d["id"], d["text"], 0, len(d["text"]), 0) for d in docs]
    encoder, sparse = Bm25Encoder.fit(c.text for c in chunks)
    index = EdgeBackend(tmp_path)
    index.create("arcd", None, {"bm25": encoder.to_dict()})
    index.upsert("arcd", chunks, None, sparse)
    index.finish("arcd")

    runs = index.search_bm25("arcd", encoder.encode_queries(q["question"] for q in questions), 10)
    index.close()
    doc_of = {point_id(c.id): c.doc_id for c in chunks}
    rankings = []
    for hits in runs:
        # trec_eval order: score descending, ties by id descending (BM25 has many ties).
        ordered = sorted(((score, doc_of[pid]) for pid, score in hits), reverse=True)
        rankings.append([doc for _, doc in ordered])
    matrix, counts = relevance(rankings, [{str(r) for r in q["relevant_ids"]} for q in questions])
    h1, h5 = float(hit_rate(matrix, counts, 1).mean()), float(hit_rate(matrix, counts, 5).mean())
    assert h5 >= 0.88, f"hit@5 {h5:.3f}"
    assert h1 >= 0.62, f"hit@1 {h1:.3f}"


def test_k1_and_b_shape_the_weights_as_the_formula_says() -> None:
    texts = ["nile nile egypt", "nile delta cairo river sea port"]

    def weight_of(vector: SparseVector, token: str) -> float:
        return dict(zip(vector.indices, vector.values, strict=True))[token_id(token)]

    for k1, b in ((0.5, 0.0), (2.0, 1.0), (1.2, 0.3)):
        encoder, (short, long) = Bm25Encoder.fit(texts, stem=False, k1=k1, b=b)
        assert (encoder.k1, encoder.b) == (k1, b)
        norm_short, norm_long = k1 * (1 - b + b * 3 / 4.5), k1 * (1 - b + b * 6 / 4.5)
        assert weight_of(short, "nile") == pytest.approx(2 * (k1 + 1) / (2 + norm_short))
        assert weight_of(long, "nile") == pytest.approx(1 * (k1 + 1) / (1 + norm_long))
    # b = 0: no length normalization, a single occurrence weighs 1 in any document; a larger k1 saturates
    # later, so a second occurrence adds more.
    _, (short, long) = Bm25Encoder.fit(texts, stem=False, k1=1.2, b=0.0)
    assert weight_of(short, "egypt") == pytest.approx(1.0) == weight_of(long, "nile")
    assert weight_of(Bm25Encoder.fit(texts, k1=0.5, b=0.0)[1][0], "nile") == pytest.approx(2 * 1.5 / 2.5)
    assert weight_of(Bm25Encoder.fit(texts, k1=3.0, b=0.0)[1][0], "nile") == pytest.approx(2 * 4 / 5)


def test_title_is_a_bm25f_field() -> None:
    """Each field's tf is normalized by its own length, the title's times its weight, then saturated once."""
    texts, titles = ["nile delta river", "cairo city river port"], ["Nile", "Egyptian capital"]
    encoder, (first, second) = Bm25Encoder.fit(texts, titles, stem=False, title_weight=2.0)
    assert encoder.avglen == 3.5 and encoder.avglen_title == 1.5
    k1, b = 1.2, 0.75
    text_tf = 1 / (1 - b + b * 3 / 3.5)
    title_tf = 2.0 * 1 / (1 - b + b * 1 / 1.5)
    nile = dict(zip(first.indices, first.values, strict=True))[token_id("nile")]
    assert nile == pytest.approx((text_tf + title_tf) * (k1 + 1) / (text_tf + title_tf + k1))
    assert token_id("capital") in second.indices, "a title word the text lacks is indexed too"
    untitled, vectors = Bm25Encoder.fit(texts, titles, stem=False)  # title_weight 0: text only
    assert token_id("capital") not in vectors[1].indices and untitled.avglen_title == 1.0
    data = json.loads(json.dumps(encoder.to_dict()))
    assert Bm25Encoder.from_dict(data) == encoder
    assert encoder.encode_documents(texts, titles) == [first, second], "a reopened index rebuilds the same"
