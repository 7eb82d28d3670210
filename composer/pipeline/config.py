"""The pipeline configuration: what a user writes by hand, what a study samples, what export writes. Each
section's settings live with their stage (``chunking/config.py``, ``embedding/config.py``,
``retrieval/config.py``, ``generation/config.py``); this module puts them together."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, ValidationInfo, field_validator

from composer.chunking.config import ChunkingConfig
from composer.embedding.config import EmbeddingConfig
from composer.errors import ConfigError, config_error
from composer.generation.config import GenerationConfig
from composer.llm.config import LLMConfig
from composer.retrieval.config import (
    BM25_SETTINGS,
    ConversationConfig,
    QueryExpansionConfig,
    RerankConfig,
    RetrievalConfig,
)
from composer.settings import Strict
from composer.yamlfile import read_yaml

INDEX_LAYOUT = 2
"""What a collection stores and how (2: its metadata records the dense dimension): part of every index
key, so a collection of another layout is never reused."""


class PipelineConfig(Strict):
    """A pipeline's settings, section by section (the format of a pipeline YAML); every key has a default.

    Attributes:
        chunking: How documents are cut into chunks.
        embedding: The dense embedding model.
        retrieval: BM25, dense or hybrid search and its ``k``.
        rerank: An optional reranker.
        conversation: How a follow-up's history shapes what is searched (query time: never the index key).
        query_expansion: Optional LLM query rewriting.
        generation: The answering LLM (``model`` None: retrieval only).

    Example:
        ::

            config = composer.PipelineConfig.from_dict({"retrieval": {"mode": "bm25", "k": 10}})
            pipe = composer.load_pipeline(config, "examples/arcd-sample/corpus.jsonl")
    """

    chunking: ChunkingConfig = ChunkingConfig()
    embedding: EmbeddingConfig = EmbeddingConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    rerank: RerankConfig = RerankConfig()
    # Left out of a config's dict at its default, so configurations hashed before the section existed keep
    # their identity (a resumed study does not re-run them).
    conversation: ConversationConfig = Field(
        default=ConversationConfig(), exclude_if=lambda section: section == ConversationConfig()
    )
    query_expansion: QueryExpansionConfig = QueryExpansionConfig()
    generation: GenerationConfig = Field(default=GenerationConfig(), validate_default=True)

    # The last section checks the LLM-backed choices before it, so the error names where a model goes.
    @field_validator("generation")
    @classmethod
    def _llm_when_needed(cls, generation: GenerationConfig, info: ValidationInfo) -> GenerationConfig:
        if generation.model is not None:
            return generation
        expansion, rerank = info.data.get("query_expansion"), info.data.get("rerank")
        conversation = info.data.get("conversation")
        if conversation is not None and conversation.rewrite == "llm" and conversation.model is None:
            raise ValueError(
                "conversation rewrite 'llm' needs an LLM: set generation.model or conversation.model"
            )
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
        """Settings that shape the index; everything else (retrieval, rerank, conversation, query expansion
        and generation) is query time and free to vary over one index."""
        from composer.index.bm25 import SCHEME  # a new token scheme must never reuse an old collection

        # Without boundaries the key is the one it was before ``respect`` existed: indexes stay reused.
        unset = {"respect"} if self.chunking.respect == "none" else None
        settings: dict[str, Any] = {
            "layout": INDEX_LAYOUT,
            "chunking": self.chunking.model_dump(exclude=unset),
            "bm25": {"scheme": SCHEME, **self.retrieval.model_dump(include=set(BM25_SETTINGS))},
        }
        if self.needs_dense_index:
            query_time = {"batch_size", "query_prefix", "api_base", "api_key_env", "device"}
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

    def resolved(self, llm: LLMConfig | None) -> PipelineConfig:
        """This config with the generator settings the run's ``llm`` block supplies written out (see
        ``GenerationConfig.resolved``): what a trial records, so its export answers as it did."""
        if llm is None:
            return self
        return self.model_copy(update={"generation": self.generation.resolved(llm)})

    def to_dict(self) -> dict[str, Any]:
        """The config as plain data (what ``from_dict`` and a pipeline YAML read)."""
        return self.model_dump(mode="json", by_alias=True)

    def prompt_resolved(self, *, base: Path | None, tracking_uri: str | None = None,
                        source: str = "<config>") -> PipelineConfig:
        """This config with ``generation.prompt`` resolved and checked (``resolve_prompt``): a file path
        relative to ``base`` (the config file's folder), a registry URI with ``tracking_uri`` (None:
        MLflow's current one). An error names ``source`` where the prompt was written in it."""
        from composer.prompts.resolve import resolve_prompt

        if self.generation.prompt is None:
            return self
        try:
            prompt = resolve_prompt(self.generation.prompt, base=base, tracking_uri=tracking_uri,
                                    field="generation.prompt")
        except ConfigError as exc:
            if exc.path is not None:
                raise
            raise ConfigError(exc.raw_message, path=source, field=exc.field) from None
        return self.model_copy(update={"generation": self.generation.model_copy(update={"prompt": prompt})})

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "<config>") -> PipelineConfig:
        """The config ``data`` describes; a bad key raises a ConfigError naming ``source`` and the key."""
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
    return PipelineConfig.from_dict(data, source=str(p)).prompt_resolved(base=p.parent, source=str(p))
