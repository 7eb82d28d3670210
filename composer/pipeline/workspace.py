"""What the pipelines of one process share: the index backend, models, LLM clients, and every stage's
memoized results.

A study builds one pipeline per trial; a trial must pay only for what no earlier trial of the process
computed. Each stage is memoized here on exactly the settings it depends on: chunks per (corpus,
chunking), an open index per index key, branch candidates per (index key, branch, query settings) and
query, standalone rewrites per (model, follow-up, history), expansions per (expansion settings,
question), answers per (answer settings, question, contexts).
What outlives the process sits on disk (embeddings, reranker scores, LLM replies, the Qdrant collections).
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path

from composer.chunking import Chunk, chunk_corpus
from composer.chunking.config import ChunkingConfig
from composer.data.types import Corpus
from composer.embedding import Embedder, EmbeddingCache, make_embedder
from composer.embedding.config import EmbeddingConfig
from composer.generation.generator import Answer
from composer.index import VectorIndex, open_index
from composer.llm import LLMClient, LLMConfig
from composer.pipeline.indexing import IndexHandle
from composer.retrieval.candidates import CandidateStore
from composer.retrieval.expansion import Expansion

# One embedder per embedding settings: its model loads once per process, not again for every trial that
# encodes (a new chunking, new questions) nor for the judge when it embeds with the same model.
_EMBEDDERS: dict[str, Embedder] = {}
# One LLM client per (settings, cache): trials share its HTTP sessions, concurrency bound and counters.
_CLIENTS: dict[tuple[str, str], LLMClient] = {}
# One workspace per (Qdrant location, workdir): a ":memory:" collection lives only as long as its client.
_WORKSPACES: dict[tuple[str | None, str], Workspace] = {}


def shared_embedder(config: EmbeddingConfig) -> Embedder:
    """The process's embedder for these settings (wrap it in a CachedEmbedder for per-run counters)."""
    slot = config.model_dump_json()
    if slot not in _EMBEDDERS:
        _EMBEDDERS[slot] = make_embedder(config)
    return _EMBEDDERS[slot]


def shared_client(config: LLMConfig, cache_dir: Path) -> LLMClient:
    """The process's client for these settings and this reply cache."""
    slot = (config.model_dump_json(), str(cache_dir.resolve()))
    if slot not in _CLIENTS:
        _CLIENTS[slot] = LLMClient(config, cache_dir=cache_dir)
    return _CLIENTS[slot]


class Workspace:
    """A work dir and Qdrant location as one process uses them; get it with ``Workspace.get``."""

    def __init__(self, workdir: Path, backend: VectorIndex) -> None:
        self.workdir = workdir
        self.backend = backend
        self.embeddings = EmbeddingCache(workdir / "cache" / "embeddings")
        self.rerank_scores = EmbeddingCache(workdir / "cache" / "rerank")
        self.candidates = CandidateStore()
        self.depth = 0
        """Least depth of every first-stage search: a study sets the deepest its space can ask for, so
        the first trial's searches serve every later trial (see ``composer.retrieval.candidates``)."""
        self.indexes: dict[str, IndexHandle] = {}
        self.rewrites: dict[Hashable, str] = {}
        self.expansions: dict[Hashable, Expansion] = {}
        self.answers: dict[Hashable, Answer] = {}
        self._chunks: dict[tuple[str, str], list[Chunk]] = {}

    @classmethod
    def get(cls, workdir: str | Path, qdrant: str | None = None, *, api_key: str | None = None) -> Workspace:
        """The process's workspace for ``workdir`` and ``qdrant`` (None: Qdrant Edge under the workdir)."""
        root = Path(workdir).resolve()
        slot = (qdrant, str(root))
        if slot not in _WORKSPACES:
            _WORKSPACES[slot] = cls(root, open_index(qdrant, root, api_key=api_key))
        return _WORKSPACES[slot]

    def close(self) -> None:
        """Release the index backend (its shards and locks) and forget every memo: what a process exit
        would do, for a caller that needs the memory or the shards back."""
        self.backend.close()
        for slot, workspace in list(_WORKSPACES.items()):
            if workspace is self:
                del _WORKSPACES[slot]

    def chunks(self, corpus: Corpus, chunking: ChunkingConfig) -> list[Chunk]:
        """The corpus's chunks for these settings, cut once per process."""
        slot = (corpus.fingerprint(), chunking.model_dump_json())
        if slot not in self._chunks:
            self._chunks[slot] = chunk_corpus(corpus, chunking)
        return self._chunks[slot]

    def client(self, config: LLMConfig) -> LLMClient:
        """The shared client for ``config``, caching replies under ``<workdir>/cache/llm``."""
        return shared_client(config, self.workdir / "cache" / "llm")
