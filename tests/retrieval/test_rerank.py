"""Rerankers: MMR on hand-made vectors, and the cross-encoder path on a tiny model built and saved here."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from composer.data import Corpus, Document, Hit, Question
from composer.embedding import CachedEmbedder, EmbeddingCache, PrefixedEmbedder
from composer.errors import ComposerError
from composer.pipeline.pipeline import Pipeline
from composer.retrieval import CrossEncoderReranker, MmrReranker, NoReranker, make_reranker, mmr_order
from composer.retrieval.config import RerankConfig


def unit(*rows: list[float]) -> np.ndarray:
    m = np.asarray(rows, dtype=np.float64)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


# -- MMR --------------------------------------------------------------------------------------------------

QUERY = unit([1.0, 0.0, 0.0])[0]
# 0 and 1 are near-duplicates and the most relevant; 2 is less relevant but points elsewhere.
DOCS = unit([0.95, 0.31, 0.0], [0.94, 0.34, 0.0], [0.7, 0.0, 0.71], [0.2, 0.98, 0.0])
RELEVANCE = DOCS @ QUERY


def test_mmr_with_lambda_one_keeps_relevance_order() -> None:
    assert mmr_order(RELEVANCE, DOCS, 1.0, 4) == list(np.argsort(-RELEVANCE))


def test_mmr_with_low_lambda_picks_the_diverse_document_before_the_duplicate() -> None:
    assert mmr_order(RELEVANCE, DOCS, 1.0, 3) == [0, 1, 2]
    assert mmr_order(RELEVANCE, DOCS, 0.5, 3) == [0, 2, 1]


def test_mmr_respects_k() -> None:
    assert len(mmr_order(RELEVANCE, DOCS, 0.5, 2)) == 2
    assert sorted(mmr_order(RELEVANCE, DOCS, 0.5, 10)) == [0, 1, 2, 3]
    assert mmr_order(RELEVANCE[:0], DOCS[:0], 0.5, 3) == []


class BagOfWords(PrefixedEmbedder):
    """Counts of a fixed vocabulary: cheap, deterministic, and near-duplicate texts get near-equal vectors."""

    VOCAB = ("cats", "sleep", "mat", "dogs", "bark", "night", "sun")

    @property
    def identity(self) -> str:
        return "test:bag-of-words"

    @property
    def dim(self) -> int:
        return len(self.VOCAB)

    def _encode(self, texts: list[str]) -> np.ndarray:
        return np.array([[t.split().count(w) + 0.01 for w in self.VOCAB] for t in texts], dtype=np.float32)


def test_mmr_reranker_demotes_near_duplicates(tmp_path: Path) -> None:
    embedder = CachedEmbedder(BagOfWords(), EmbeddingCache(tmp_path))
    texts = ["cats sleep on the mat", "cats sleep on a mat", "dogs bark at night and cats sleep"]
    hits = [Hit(id=f"c{i}", score=1.0 - i / 10, text=t) for i, t in enumerate(texts)]
    relevance = [h.id for h in MmrReranker(embedder, 1.0).rerank(["cats sleep mat"], [hits], 3)[0]]
    diverse = [h.id for h in MmrReranker(embedder, 0.3).rerank(["cats sleep mat"], [hits], 3)[0]]
    assert relevance == ["c0", "c1", "c2"]
    assert diverse == ["c0", "c2", "c1"]
    assert MmrReranker(embedder, 0.3).rerank(["q"], [[]], 3) == [[]]


def test_no_reranker_keeps_order_and_cuts_at_k() -> None:
    hits = [Hit(id=str(i), score=float(-i)) for i in range(5)]
    assert NoReranker().rerank(["q", "r"], [hits, hits[:1]], 3) == [hits[:3], hits[:1]]


def test_make_reranker(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    assert isinstance(make_reranker(RerankConfig(), cache=cache, embedder=None), NoReranker)
    with pytest.raises(ComposerError, match="needs an embedding model"):
        make_reranker(RerankConfig(method="mmr"), cache=cache, embedder=None)
    ce = make_reranker(RerankConfig(method="cross-encoder", model=str(tmp_path)), cache=cache, embedder=None)
    assert isinstance(ce, CrossEncoderReranker)


def test_hub_cross_encoder_missing_offline_is_a_clear_error(tmp_path: Path) -> None:
    reranker = CrossEncoderReranker("composer-tests/no-such-cross-encoder", EmbeddingCache(tmp_path))
    with pytest.raises(ComposerError, match="no-such-cross-encoder"):
        reranker.rerank(["q"], [[Hit(id="a", score=1.0, text="t")]], 1)


# -- cross-encoder ----------------------------------------------------------------------------------------

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "cats", "dogs", "sleep", "bark", "mat", "sun", "rain",
         "night", "garden", "the", "on", "in", "a", "and", "at", "where", "do", "what"]

CORPUS = Corpus(
    [
        Document("d0", "cats sleep on the mat"),
        Document("d1", "dogs bark at night"),
        Document("d2", "cats and dogs sleep in the garden"),
        Document("d3", "the sun and the rain"),
        Document("d4", "dogs sleep on the mat at night"),
        Document("d5", "cats bark at the sun"),
        Document("d6", "rain in the garden at night"),
        Document("d7", "a mat in the sun"),
    ],
    source="tiny",
)
QUESTIONS = [
    Question("q0", "where do cats sleep"),
    Question("q1", "what dogs bark at night"),
    Question("q2", "sun and rain in the garden"),
    Question("q3", "cats sleep on the mat at night"),
]


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 1-layer, 16-dim BERT sequence classifier (one label) with random but spread-out weights."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    path = tmp_path_factory.mktemp("models") / "tiny-cross-encoder"
    torch.manual_seed(0)
    # A large initializer_range, or the random head gives every pair almost the same score.
    config = BertConfig(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, initializer_range=0.5)
    config.num_labels = 1  # one relevance logit, as CrossEncoder expects
    BertForSequenceClassification(config).save_pretrained(str(path))
    BertTokenizer(vocab={w: i for i, w in enumerate(VOCAB)}).save_pretrained(str(path))
    hf_logging.enable_progress_bar()
    return path


def pipeline(model: Path, workdir: Path, k: int = 3) -> Pipeline:
    cfg: dict[str, Any] = {
        "retrieval": {"mode": "bm25", "k": k, "prefetch": 6},
        "rerank": {"method": "cross-encoder", "model": str(model)},
    }
    p = Pipeline.from_config(cfg, workdir=workdir)
    p.index(CORPUS)
    return p


def first_stage(workdir: Path) -> dict[str, list[Hit]]:
    """What the reranker gets: BM25's top ``prefetch`` (6)."""
    bm25 = Pipeline.from_config({"retrieval": {"mode": "bm25", "k": 6}}, workdir=workdir)
    bm25.index(CORPUS)
    return bm25.retrieve(QUESTIONS)


def test_cross_encoder_reorders_by_the_model_scores(
    tiny_cross_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sentence_transformers import CrossEncoder

    reranked = pipeline(tiny_cross_encoder, tmp_path).retrieve(QUESTIONS)
    assert "Loading weights" not in capsys.readouterr().err  # no stray bar through the CLI's own
    candidates = first_stage(tmp_path)
    model = CrossEncoder(str(tiny_cross_encoder), device="cpu")

    reordered = 0
    for q in QUESTIONS:
        hits = candidates[q.id]
        assert len(hits) > 3, "the test needs more candidates than k"
        scores = model.predict([(q.question, h.text) for h in hits])
        order = np.argsort(-scores, kind="stable")[:3]
        assert [h.id for h in reranked[q.id]] == [hits[i].id for i in order]
        np.testing.assert_allclose([h.score for h in reranked[q.id]], scores[order], rtol=1e-5)
        assert all(h.doc_id and h.text for h in reranked[q.id])
        reordered += [h.id for h in reranked[q.id]] != [h.id for h in hits[:3]]
    assert reordered, "the model never disagreed with BM25: the test would not show a rerank"


def test_cross_encoder_scores_are_cached(tiny_cross_encoder: Path, tmp_path: Path) -> None:
    first = pipeline(tiny_cross_encoder, tmp_path)
    run = first.retrieve(QUESTIONS)
    pairs = first.cache_stats["rerank_scores_computed"]
    assert pairs > 3 * len(QUESTIONS)
    assert first.cache_stats["rerank_scores_reused"] == 0

    second = pipeline(tiny_cross_encoder, tmp_path)  # a fresh pipeline: only the disk cache remembers
    assert second.retrieve(QUESTIONS) == run
    assert second.cache_stats["rerank_scores_computed"] == 0
    assert second.cache_stats["rerank_scores_reused"] == pairs


@pytest.mark.parametrize("k", [1, 2, 5])
def test_cross_encoder_respects_k(tiny_cross_encoder: Path, tmp_path: Path, k: int) -> None:
    run = pipeline(tiny_cross_encoder, tmp_path, k=k).retrieve(QUESTIONS)
    candidates = first_stage(tmp_path)
    for qid, hits in run.items():
        assert len(hits) == min(k, len(candidates[qid]))
        assert {h.id for h in hits} <= {h.id for h in candidates[qid]}
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize("lam", [1.0, 0.3])
def test_mmr_through_the_pipeline(tmp_path: Path, lam: float) -> None:
    """A BM25 pipeline with MMR: the top ``prefetch`` candidates, reordered over the configured embedder."""
    cfg = {"retrieval": {"mode": "bm25", "k": 3, "prefetch": 6}, "rerank": {"method": "mmr", "lambda": lam}}
    p = Pipeline.from_config(cfg, workdir=tmp_path)
    p.index(CORPUS)
    run = p.retrieve(QUESTIONS)
    candidates = first_stage(tmp_path)
    for q in QUESTIONS:
        hits = candidates[q.id]
        scores = np.array([h.score for h in hits])
        relevance = (scores - scores.min()) / (scores.max() - scores.min())  # the retriever's scores, scaled
        docs = p.embedder.encode_passages([h.text or "" for h in hits])
        assert [h.id for h in run[q.id]] == [hits[i].id for i in mmr_order(relevance, docs, lam, 3)]
        if lam == 1.0:
            assert [h.id for h in run[q.id]] == [h.id for h in hits[:3]]  # lambda 1 keeps BM25's order


def test_cross_encoder_device_is_a_setting_and_cpu_keeps_old_config_hashes(
    tiny_cross_encoder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rerank.device`` reaches the model; left at cpu it is not in the config's dict, so configurations
    hashed before the setting existed keep their identity."""
    import torch

    plain = RerankConfig(method="cross-encoder", model=str(tiny_cross_encoder))
    assert "device" not in plain.model_dump(mode="json", by_alias=True)
    assert RerankConfig(method="cross-encoder", model="m", device="auto").model_dump()["device"] == "auto"
    with pytest.raises(ValueError, match="device 'cuda' needs method 'cross-encoder'"):
        RerankConfig(method="mmr", device="cuda")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    hits = [[Hit(id="a", score=1.0, text="cats sleep"), Hit(id="b", score=0.5, text="dogs bark")]]
    auto = make_reranker(
        RerankConfig(method="cross-encoder", model=str(tiny_cross_encoder), device="auto"),
        cache=EmbeddingCache(tmp_path / "auto"),
        embedder=None,
    )
    assert len(auto.rerank(["where do cats sleep"], hits, 2)[0]) == 2  # auto without a GPU: cpu
    cuda = make_reranker(
        RerankConfig(method="cross-encoder", model=str(tiny_cross_encoder), device="cuda"),
        cache=EmbeddingCache(tmp_path / "cuda"),
        embedder=None,
    )
    with pytest.raises(ComposerError, match=r"rerank\.device is 'cuda' but torch sees no CUDA GPU"):
        cuda.rerank(["where do cats sleep"], hits, 2)
