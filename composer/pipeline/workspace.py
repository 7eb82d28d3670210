"""What the pipelines of one process share: the index backend, models, LLM clients, and every stage's
memoized results.

A study builds one pipeline per trial; a trial must pay only for what no earlier trial of the process
computed. Each stage is memoized here on exactly the settings it depends on: chunks per (corpus,
chunking), an open index per index key, branch candidates per (index key, branch, query settings) and
query, standalone rewrites per (model, follow-up, history), expansions per (expansion settings,
question), answers per (answer settings, question, contexts).
What outlives the process sits on disk (embeddings, reranker scores, LLM replies, the Qdrant collections),
or, for the caches, in the PostgreSQL database an experiment's ``caches:`` names (``use_caches``).
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path

from composer.chunking import Chunk, chunk_corpus
from composer.chunking.config import ChunkingConfig
from composer.data.types import Corpus
from composer.embedding import Embedder, EmbeddingCache, make_embedder
from composer.embedding.actors import PooledEmbedder, attached_encoders
from composer.embedding.config import EmbeddingConfig
from composer.generation.generator import Answer
from composer.index import VectorIndex, open_index
from composer.llm import LLMClient, LLMConfig
from composer.pipeline.indexing import IndexHandle
from composer.rdb_store import PostgresStore
from composer.retrieval.candidates import CandidateStore
from composer.retrieval.expansion import Expansion

# One embedder per embedding settings (and encoding actors attached or not): its model loads once per
# process, not again for every trial that encodes (a new chunking, new questions) nor for the judge when
# it embeds with the same model.
_EMBEDDERS: dict[tuple[str, str | None], Embedder] = {}
# One LLM client per (settings, cache): trials share its HTTP sessions, concurrency bound and counters.
_CLIENTS: dict[tuple[str, str, str | None], LLMClient] = {}
# One workspace per (Qdrant location, workdir, caches): a ":memory:" collection lives only as long as its
# client.
_WORKSPACES: dict[tuple[str | None, str, str | None], Workspace] = {}
# The ``caches:`` URL of each work dir (resolved) whose caches live in PostgreSQL.
_CACHES: dict[str, str] = {}


def use_caches(workdir: str | Path, caches: str | None) -> None:
    """Keep the embedding, reranker-score and LLM reply caches of ``workdir``'s workspaces in the
    PostgreSQL database ``caches`` names (None: the SQLite files under the work dir). A study calls it
    once with its experiment's ``caches:``, before any pipeline or judge opens the work dir, so every
    workspace of the process on that work dir (the pipelines' and the judge's) shares them; a Ray worker
    does the same with the experiment it was given. A database that cannot be used is a ConfigError
    (``caches``) here, before the study starts."""
    root = str(Path(workdir).resolve())
    if caches is None:
        _CACHES.pop(root, None)
    else:
        PostgresStore(caches, ())  # a wrong URL or a server out of reach: one line now, not mid-study
        _CACHES[root] = caches


def caches_of(workdir: str | Path) -> str | None:
    """The PostgreSQL URL ``use_caches`` gave ``workdir``'s caches (None: the SQLite files under it)."""
    return _CACHES.get(str(Path(workdir).resolve()))


def shared_embedder(config: EmbeddingConfig) -> Embedder:
    """The process's embedder for these settings (wrap it in a CachedEmbedder for per-run counters);
    while encoding actors are attached (``composer.embedding.actors``), one that encodes on them."""
    encoders = attached_encoders()
    slot = (config.model_dump_json(), None if encoders is None else encoders.namespace)
    if slot not in _EMBEDDERS:
        local = make_embedder(config)
        _EMBEDDERS[slot] = local if encoders is None else PooledEmbedder(local, config, encoders)
    return _EMBEDDERS[slot]


def shared_client(config: LLMConfig, cache_dir: Path, caches: str | None = None) -> LLMClient:
    """The process's client for these settings and this reply cache (``caches``: see ``use_caches``)."""
    slot = (config.model_dump_json(), str(cache_dir.resolve()), caches)
    if slot not in _CLIENTS:
        _CLIENTS[slot] = LLMClient(config, cache_dir=cache_dir, caches=caches)
    return _CLIENTS[slot]


class Workspace:
    """A work dir and Qdrant location as one process uses them; get it with ``Workspace.get``."""

    def __init__(self, workdir: Path, backend: VectorIndex, caches: str | None = None) -> None:
        self.workdir = workdir
        self.backend = backend
        self.caches = caches
        """The PostgreSQL URL holding its caches (``use_caches``); None: SQLite files under the work dir."""
        self.embeddings = EmbeddingCache(workdir / "cache" / "embeddings", caches=caches)
        self.rerank_scores = EmbeddingCache(workdir / "cache" / "rerank", caches=caches)
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
        caches = caches_of(root)
        slot = (qdrant, str(root), caches)
        if slot not in _WORKSPACES:
            _WORKSPACES[slot] = cls(root, open_index(qdrant, root, api_key=api_key), caches)
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
        """The shared client for ``config``, caching replies under ``<workdir>/cache/llm`` (or in
        ``caches``)."""
        return shared_client(config, self.workdir / "cache" / "llm", self.caches)
