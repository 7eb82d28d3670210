"""Retrieval settings (a pipeline's ``retrieval:``, ``rerank:`` and ``query_expansion:`` sections)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator

from composer.embedding.config import Device
from composer.settings import Strict
from composer.text.analyzers import AnalyzerName


class RetrievalConfig(Strict):
    """First-stage search. Hybrid fuses the dense and BM25 lists (each cut at ``prefetch``): RRF and DBSF
    as Qdrant computes them, or a convex combination (AutoRAG's hybrid_cc) of normalized scores with
    ``weight`` on the dense side (see ``composer.retrieval.fusion``)."""

    mode: Literal["dense", "bm25", "hybrid"] = "hybrid"
    k: int = Field(default=5, ge=1, le=1000)
    # DBSF beats RRF on ARCD at every prefetch (hit@5 0.880 vs 0.841, benchmarks/README.md).
    fusion: Literal["rrf", "dbsf", "convex"] = "dbsf"
    prefetch: int = Field(
        default=50, ge=1, le=10000, description="Candidates per branch before fusion or rerank."
    )
    rrf_k: int = Field(default=60, ge=1)
    normalization: Literal["minmax", "theoretical_minmax", "zscore", "dbsf"] = Field(
        default="minmax", description="convex fusion only: how each branch's scores are normalized."
    )
    weight: float = Field(default=0.5, ge=0.0, le=1.0, description="convex fusion only: the dense share.")
    # BM25's index-time settings (see BM25_SETTINGS): each value is a collection of its own.
    analyzer: AnalyzerName = Field(
        default="default",
        description="BM25 tokens: default, isri, tashaphyne, rishe or plain (composer.text.analyzers).",
    )
    stem: bool = Field(default=True, description="Apply the analyzer's stemmer or lemmatizer to BM25 tokens.")
    stopwords: bool = Field(default=True, description="Drop function words from BM25 tokens.")
    k1: float = Field(default=1.2, ge=0.0, le=10.0, description="BM25 term-frequency saturation.")
    b: float = Field(default=0.75, ge=0.0, le=1.0, description="BM25 document-length normalization.")
    title_weight: float = Field(
        default=0.0,
        ge=0.0,
        le=20.0,
        description="Weight of the document title as a second BM25 field (BM25F); 0 indexes the text only.",
    )


BM25_SETTINGS = ("analyzer", "stem", "stopwords", "k1", "b", "title_weight")
"""Retrieval settings that shape the BM25 vectors, so they are index time (``index_settings``)."""


class RerankConfig(Strict):
    method: Literal["none", "cross-encoder", "mmr", "llm"] = "none"
    model: str | None = Field(
        default=None,
        validate_default=True,
        description="Cross-encoder name or path; for 'llm' a litellm model (default generation.model).",
    )
    mmr_lambda: float = Field(default=0.7, ge=0.0, le=1.0, alias="lambda")
    batch_size: int = Field(default=32, ge=1)
    mode: Literal["listwise", "pointwise"] = Field(
        default="listwise", description="'llm' only: one ranking call per question, or a grade per passage."
    )
    top_n: int = Field(default=10, ge=1, le=100, description="'llm' only: hits the LLM reorders.")
    device: Device = Field(
        default="cpu",
        # Left out of a config's dict at its default, so configurations hashed before the setting existed
        # keep their identity (a resumed study does not re-run them).
        exclude_if=lambda device: device == "cpu",
        description="'cross-encoder' only: where the model scores pairs: cpu, cuda, or auto (cuda when torch "
        "sees a GPU, else cpu). Scores are cached by model, not device.",
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("model")
    @classmethod
    def _model_when_needed(cls, model: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("method") == "cross-encoder" and not model:
            raise ValueError("method 'cross-encoder' needs 'model'")
        return model

    @field_validator("device")
    @classmethod
    def _device_for_cross_encoder(cls, device: Device, info: ValidationInfo) -> Device:
        """Only a cross-encoder runs on a device Composer chooses; elsewhere the setting would do nothing."""
        if device != "cpu" and info.data.get("method") != "cross-encoder":
            raise ValueError(f"device '{device}' needs method 'cross-encoder'")
        return device


class QueryExpansionConfig(Strict):
    """LLM query expansion before search; results of the expanded queries are fused by RRF.

    ``multi_query`` searches the question and ``n`` paraphrases; ``step_back`` the question and one more
    general question about the concept behind it (Zheng et al. 2023). ``hyde`` embeds a hypothetical answer
    passage for the dense branch (averaged with the question's vector, as in the HyDE paper) while BM25
    keeps the question's words: a hallucinated passage would add exact-match noise, so BM25-only
    pipelines make no HyDE call at all. Expansion runs at temperature 0, so every trial that shares a
    question shares its (cached) expansion.
    """

    method: Literal["none", "multi_query", "step_back", "hyde"] = "none"
    n: int = Field(default=3, ge=1, le=10, description="Paraphrases per question (multi_query).")


class ConversationConfig(Strict):
    """How a follow-up's conversation shapes what is searched (``composer.retrieval.conversation``).

    ``concat`` is the default: a question without history searches exactly as it did before the section
    existed (same query, same hits), so a standalone set is unchanged, while a follow-up such as "and when
    did he die?" finds its passage through the turns it leans on, with no LLM. ``none`` searches each
    question's own words; ``llm`` has the helper LLM condense follow-up and history into one standalone
    question. None of it shapes an index: a study searching this section reuses every index it built.
    """

    rewrite: Literal["none", "concat", "llm"] = "concat"
    window: int = Field(default=2, ge=0, le=20, description="Earlier user turns used (the most recent).")
    assistant: bool = Field(default=False, description="Include the assistant turns of the window.")
    weight: float = Field(
        default=0.7, ge=0.5, le=1.0, description="concat: the follow-up's share; the history has the rest."
    )
    model: str | None = Field(default=None, description="llm: the rewriting model (default generation.model)")
