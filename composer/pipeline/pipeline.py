"""A configured RAG pipeline: corpus -> chunks -> cached embeddings -> Qdrant index; then per question
[query expansion] -> search -> [rerank] -> ranked chunks -> answer."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from composer.chunking import Chunk, chunk_corpus
from composer.data.types import Corpus, Hit, Question, Run
from composer.embedding import CachedEmbedder, Embedder, EmbeddingCache, make_embedder
from composer.errors import ComposerError
from composer.generation import Answer, Expansion, Generator, QueryExpander, answer_questions, fuse_rankings
from composer.index import Bm25Encoder, SparseVector, VectorIndex, open_index
from composer.index.base import IndexBuildLost
from composer.llm import LLMClient, LLMConfig, judge_config
from composer.pipeline.config import EmbeddingConfig, PipelineConfig, load_pipeline_config
from composer.retrieval import Reranker, make_reranker

DEFAULT_WORKDIR = Path(".composer")
QUERY_BLOCK = 256
"""Questions searched per Qdrant batch; also the granularity of the query progress bar."""
INDEX_BLOCK = 1024
"""Chunks upserted per step of the index progress bar (the backend batches further)."""
BUILD_WAIT_S = 120.0
"""How long a build another worker took over (its vectors are ready: only its upsert is left) may take
to finish before this worker builds the index again itself."""
BUILD_POLL_S = 0.5

ProgressHook = Callable[[str, int, int], None]
"""``hook(stage, done, total)`` for stage in "encode", "index", "query"; the CLI draws Rich bars from it."""

# One backend per (location, root): a ":memory:" collection lives only as long as its client, so every
# pipeline of a process (every trial of a study) must share it to reuse what an earlier one built.
_BACKENDS: dict[tuple[str | None, str], VectorIndex] = {}
# One LLM client per (settings, cache): trials share its HTTP sessions, concurrency bound and counters.
_CLIENTS: dict[tuple[str, str], LLMClient] = {}
# One embedder per embedding settings: its model loads once per process, not again for every trial that
# encodes (a new chunking, new questions) nor for the judge when it embeds with the same model.
_EMBEDDERS: dict[str, Embedder] = {}


def shared_client(config: LLMConfig, cache_dir: Path) -> LLMClient:
    """The process's client for these settings and this reply cache."""
    slot = (config.model_dump_json(), str(cache_dir.resolve()))
    if slot not in _CLIENTS:
        _CLIENTS[slot] = LLMClient(config, cache_dir=cache_dir)
    return _CLIENTS[slot]


def shared_embedder(config: EmbeddingConfig) -> Embedder:
    """The process's embedder for these settings (wrap it in a CachedEmbedder for per-run counters)."""
    slot = config.model_dump_json()
    if slot not in _EMBEDDERS:
        _EMBEDDERS[slot] = make_embedder(config)
    return _EMBEDDERS[slot]


@dataclass(frozen=True)
class IndexInfo:
    key: str
    n_documents: int
    n_chunks: int
    reused: bool
    embeddings_computed: int
    embeddings_reused: int
    seconds: float


class Pipeline:
    """Index a corpus once per index key, then retrieve (expand, search, rerank) and answer questions.

    ``llm`` holds the run's LLM settings (timeout, concurrency, retries, cache, prices); the config names
    the models. LLM replies are cached under ``<workdir>/cache/llm``.
    """

    def __init__(
        self,
        config: PipelineConfig,
        *,
        workdir: Path = DEFAULT_WORKDIR,
        backend: VectorIndex,
        progress: ProgressHook | None = None,
        llm: LLMConfig | None = None,
    ) -> None:
        self.config = config
        self.workdir = Path(workdir)
        self.backend = backend
        self.progress = progress
        self.llm = llm
        self._cache = EmbeddingCache(self.workdir / "cache" / "embeddings")
        self._embedder: CachedEmbedder | None = None
        self._reranker: Reranker | None = None
        self._expander: QueryExpander | None = None
        self._generator: Generator | None = None
        self._key: str | None = None
        self._bm25: Bm25Encoder | None = None
        self._chunks: list[Chunk] = []

    @classmethod
    def from_config(
        cls,
        config: PipelineConfig | Mapping[str, Any] | str | Path,
        *,
        workdir: str | Path = DEFAULT_WORKDIR,
        qdrant: str | None = None,
        api_key: str | None = None,
        progress: ProgressHook | None = None,
        llm: LLMConfig | None = None,
    ) -> Pipeline:
        """``config`` is a PipelineConfig, a dict of it, or a YAML path; ``qdrant`` None means Qdrant Edge."""
        if isinstance(config, (str, Path)):
            config = load_pipeline_config(config)
        elif not isinstance(config, PipelineConfig):
            config = PipelineConfig.from_dict(dict(config))
        workdir = Path(workdir)
        slot = (qdrant, str(workdir.resolve()))
        if slot not in _BACKENDS:
            _BACKENDS[slot] = open_index(qdrant, workdir, api_key=api_key)
        return cls(config, workdir=workdir, backend=_BACKENDS[slot], progress=progress, llm=llm)

    @property
    def embedder(self) -> CachedEmbedder:
        if self._embedder is None:
            on_progress = None
            if self.progress is not None:
                hook = self.progress
                on_progress = lambda done, total: hook("encode", done, total)  # noqa: E731
            self._embedder = CachedEmbedder(
                shared_embedder(self.config.embedding), self._cache, on_progress=on_progress
            )
        return self._embedder

    @property
    def cache_stats(self) -> dict[str, int]:
        emb = self._embedder
        stats = {
            "embeddings_computed": emb.computed if emb else 0,
            "embeddings_reused": emb.reused if emb else 0,
        }
        for name in ("computed", "reused"):
            if hasattr(self._reranker, name):
                stats[f"rerank_scores_{name}"] = int(getattr(self._reranker, name))
        return stats

    @property
    def key(self) -> str:
        if self._key is None:
            raise ComposerError("index a corpus first: pipeline.index(corpus)")
        return self._key

    def index(self, corpus: Corpus) -> IndexInfo:
        """Build the collection for this corpus and these index settings, or reuse the one already built."""
        started = time.perf_counter()
        before = self.cache_stats
        identity = self.embedder.identity if self.config.needs_dense_index else None
        key = self.config.index_key(corpus.fingerprint(), identity)
        self._chunks = chunk_corpus(corpus, self.config.chunking)
        reused = self.backend.exists(key) or self._build(key, self._chunks)
        if reused:
            self._bm25 = Bm25Encoder.from_dict(self.backend.meta(key)["bm25"])
        self._key = key
        after = self.cache_stats
        return IndexInfo(
            key=key,
            n_documents=len(corpus),
            n_chunks=len(self._chunks),
            reused=reused,
            embeddings_computed=after["embeddings_computed"] - before["embeddings_computed"],
            embeddings_reused=after["embeddings_reused"] - before["embeddings_reused"],
            seconds=time.perf_counter() - started,
        )

    def _build(self, key: str, chunks: list[Chunk]) -> bool:
        """Build the collection; True when another worker built it meanwhile and that one is reused.

        Workers sharing a Qdrant server may start the same new index at once: the later ``create``
        drops the earlier build, whose ``finish`` then refuses to mark the other's collection complete.
        The loser waits for the winner's build to finish and reuses it, or, if it never does (its
        worker died), builds the index once more; losing again is an error.
        """
        texts = [c.text for c in chunks]
        bm25, sparse = Bm25Encoder.fit(texts, stem=self.config.retrieval.stem)
        dense = self.embedder.encode_passages(texts) if self.config.needs_dense_index else None
        meta = {"bm25": bm25.to_dict(), "n_chunks": len(chunks), "settings": self.config.index_settings()}
        self._fill(key, chunks, dense, sparse, meta)
        try:
            self.backend.finish(key)
        except IndexBuildLost:  # the build was dropped or replaced by another worker's
            if self._built_elsewhere(key):
                return True
            self._fill(key, chunks, dense, sparse, meta)
            self.backend.finish(key)
        self._bm25 = bm25
        return False

    def _fill(self, key: str, chunks: list[Chunk], dense: np.ndarray | None, sparse: list[SparseVector],
              meta: dict[str, Any]) -> None:
        """Create the collection (dropping what it held) and upsert every chunk, reporting progress."""
        self.backend.create(key, None if dense is None else int(dense.shape[1]), meta)
        total = len(chunks)
        self._report("index", 0, total)
        for lo in range(0, total, INDEX_BLOCK):
            hi = min(lo + INDEX_BLOCK, total)
            self.backend.upsert(key, chunks[lo:hi], None if dense is None else dense[lo:hi], sparse[lo:hi])
            self._report("index", hi, total)

    def _built_elsewhere(self, key: str) -> bool:
        """Whether another worker's build of ``key`` is complete within ``BUILD_WAIT_S``."""
        deadline = time.monotonic() + BUILD_WAIT_S
        while not self.backend.exists(key):
            if time.monotonic() >= deadline:
                return False
            time.sleep(BUILD_POLL_S)
        return True

    def _report(self, stage: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(stage, done, total)

    def universe(self) -> dict[str, tuple[str, str]]:
        """Every indexed chunk as chunk_id -> (doc_id, text): the pool that answer matching judges."""
        self.key  # noqa: B018 - raises when nothing is indexed
        return {c.id: (c.doc_id, c.text) for c in self._chunks}

    def retrieve(self, questions: Iterable[Question]) -> Run:
        """Top ``retrieval.k`` hits per question, after reranking."""
        return self.retrieve_timed(questions)[0]

    def retrieve_timed(self, questions: Iterable[Question]) -> tuple[Run, dict[str, dict[str, float]]]:
        """The run and, per question, seconds per stage ("expand" when on, "retrieve", "rerank"),
        amortized over each batch.

        ``questions`` may be a QuestionSet, a list or any iterable of questions.
        """
        run: Run = {}
        latency: dict[str, dict[str, float]] = {}
        items = list(questions)
        total = len(items)
        for lo in range(0, total, QUERY_BLOCK):
            block = items[lo : lo + QUERY_BLOCK]
            texts = [q.question for q in block]
            t0 = time.perf_counter()
            expansions = self._expand(texts)
            t1 = time.perf_counter()
            candidates = self._first_stage(texts) if expansions is None else self._expanded(expansions)
            t2 = time.perf_counter()
            hits = self.reranker.rerank(texts, candidates, self.config.retrieval.k)
            t3 = time.perf_counter()
            n = max(len(block), 1)
            for q, ranked in zip(block, hits, strict=True):
                run[q.id] = ranked
                latency[q.id] = {"retrieve": (t2 - t1) / n, "rerank": (t3 - t2) / n}
                if expansions is not None:
                    latency[q.id]["expand"] = (t1 - t0) / n
            self._report("query", min(lo + QUERY_BLOCK, total), total)
        return run, latency

    def answer(
        self, questions: Iterable[Question], run: Run, *, max_failures: int | None = None
    ) -> dict[str, Answer]:
        """Question id -> Answer from the question's hits in ``run``: the LLM generator when
        ``generation.model`` is set, else the offline extractive answerer. A failed generation is an
        Answer with ``text`` None and the failure in ``result``, never an exception; past
        ``max_failures`` failed answers the remaining calls are cancelled (see ``answer_questions``)."""
        return answer_questions(list(questions), run, self.generator, max_failures=max_failures)

    @property
    def generator_llm(self) -> LLMConfig | None:
        """The generator's settings (None: extractive answers)."""
        return self.config.generation.llm_config(self.llm)

    @property
    def generator(self) -> Generator | None:
        if self._generator is None and (cfg := self.generator_llm) is not None:
            gen = self.config.generation
            self._generator = Generator(self._client(cfg), gen.template, max_contexts=gen.max_contexts)
        return self._generator

    def _client(self, config: LLMConfig) -> LLMClient:
        return shared_client(config, self.workdir / "cache" / "llm")

    def _helper_llm(self, model: str | None = None) -> LLMClient:
        """The client for query expansion and LLM reranking: ``model`` (default the generator's) at
        temperature 0, so every trial asking the same shares the cached reply whatever its answer
        temperature."""
        base = self.generator_llm or self.llm
        config = judge_config(base, model)
        if config is None:
            raise ComposerError("query expansion and LLM reranking need an LLM: set generation.model")
        return self._client(config)

    @property
    def expander(self) -> QueryExpander | None:
        """None unless expansion is configured and applies (HyDE never touches BM25-only search)."""
        qe = self.config.query_expansion
        if qe.method == "none" or (qe.method == "hyde" and self.config.retrieval.mode == "bm25"):
            return None
        if self._expander is None:
            self._expander = QueryExpander(self._helper_llm(), qe.method, qe.n)
        return self._expander

    def _expand(self, texts: list[str]) -> list[Expansion] | None:
        expander = self.expander
        return None if expander is None else expander.expand_many(texts)

    def _expanded(self, expansions: list[Expansion]) -> list[list[Hit]]:
        """First-stage hits for expanded questions: multi-query searches every query and fuses the lists
        by RRF; HyDE searches the dense branch with the mean of the question's vector and its
        hypothetical passage's (the BM25 branch keeps the question)."""
        if self.config.query_expansion.method == "multi_query":
            flat = [q for e in expansions for q in e.queries]
            lists = self._first_stage(flat)
            out: list[list[Hit]] = []
            start = 0
            for e in expansions:
                end = start + len(e.queries)
                out.append(fuse_rankings(lists[start:end], k=self.config.retrieval.rrf_k, limit=self._depth))
                start = end
            return out
        texts = [e.question for e in expansions]
        vectors = np.array(self.embedder.encode_queries(texts), dtype=np.float32)  # a writable copy
        passages = [p for e in expansions for p in e.passages]
        if passages:
            encoded = iter(self.embedder.encode_passages(passages))
            for i, e in enumerate(expansions):
                if e.passages:
                    mean = np.mean([vectors[i], *(next(encoded) for _ in e.passages)], axis=0)
                    vectors[i] = mean / (np.linalg.norm(mean) or 1.0)
        return self._first_stage(texts, vectors)

    def search(self, query: str) -> list[Hit]:
        """Ranked chunks for one query string."""
        return self.retrieve([Question(id="query", question=query)])["query"]

    @property
    def reranker(self) -> Reranker:
        if self._reranker is None:
            cfg = self.config.rerank
            embedder = self.embedder if cfg.method == "mmr" else None
            llm = self._helper_llm(cfg.model) if cfg.method == "llm" else None
            self._reranker = make_reranker(
                cfg, cache=EmbeddingCache(self.workdir / "cache" / "rerank"), embedder=embedder, llm=llm
            )
        return self._reranker

    @property
    def _depth(self) -> int:
        """Hits per first-stage search: k, or the prefetch a reranker chooses from."""
        r = self.config.retrieval
        return r.k if self.config.rerank.method == "none" else max(r.k, r.prefetch)

    def _first_stage(self, texts: list[str], dense: np.ndarray | None = None) -> list[list[Hit]]:
        """Search the index for ``texts``; ``dense`` replaces their query vectors (HyDE)."""
        r = self.config.retrieval
        depth = self._depth
        key = self.key
        if self._bm25 is None:
            raise ComposerError("index a corpus first: pipeline.index(corpus)")
        if r.mode == "bm25":
            return self.backend.search_bm25(key, self._bm25.encode_queries(texts), depth)
        if dense is None:
            dense = self.embedder.encode_queries(texts)
        if r.mode == "dense":
            return self.backend.search_dense(key, dense, depth)
        sparse = self._bm25.encode_queries(texts)
        return self.backend.search_hybrid(
            key, dense, sparse, depth, fusion=r.fusion, prefetch=max(r.prefetch, depth), rrf_k=r.rrf_k
        )
