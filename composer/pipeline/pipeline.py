"""A configured RAG pipeline: corpus -> chunks -> cached embeddings -> Qdrant index; then per question
[conversation] -> [query expansion] -> branch candidates -> [fusion] -> [rerank] -> ranked chunks -> answer.

Every stage's result is memoized in the process's ``Workspace`` on exactly the settings it depends on, so
the pipelines of a study's trials share whatever they have in common, and ``composer eval --config`` runs
the very code that scored the trial.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from composer.chunking.chunk import Chunk
from composer.data.ranking import Ranking
from composer.data.types import Corpus, Hit, HitLists, Question, StageError
from composer.embedding import CachedEmbedder
from composer.errors import ComposerError
from composer.generation import Answer, Generator
from composer.index.base import IndexInfo
from composer.index.bm25 import Progress
from composer.llm import LLMClient, LLMConfig, helper_config
from composer.pipeline.answers import AnswerHook, memoized_answers
from composer.pipeline.config import PipelineConfig, load_pipeline_config
from composer.pipeline.indexing import IndexHandle
from composer.pipeline.reopening import open_or_build_for, reopen_newest
from composer.pipeline.saved import SAVED_DIR
from composer.pipeline.searches import index_branches
from composer.pipeline.workspace import Workspace, shared_embedder
from composer.retrieval import Reranker, make_reranker
from composer.retrieval.conversation import ConversationStage, HistoryLike, history_turns
from composer.retrieval.expansion import QueryExpander
from composer.retrieval.retriever import Latency, Retriever

logger = logging.getLogger(__name__)

DEFAULT_WORKDIR = Path(".composer")
SCRATCH = "scratch"
"""The work dir's folder of unlinked files: a large index's vectors mapped for rescoring (``ExactScores``)."""

class Pipeline:
    """Index a corpus once per index key, then rank questions and answer them.

    ``llm`` holds the run's LLM settings (timeout, concurrency, retries, cache, prices); the config names
    the models. LLM replies are cached under ``<workdir>/cache/llm``. Build one with
    ``composer.load_pipeline`` (or ``Pipeline.from_config``).

    Args:
        config: The pipeline's settings.
        workspace: Where its indexes and caches live.
        progress: Called as indexing advances.
        llm: The run's LLM settings (default: ``LLMConfig()``).

    Example:
        ::

            pipe = composer.load_pipeline({"retrieval": {"mode": "bm25", "k": 5}},
                                          "examples/arcd-sample/corpus.jsonl")
            hits = pipe.search("متى ولد جمال خاشقجي؟")
            answer = pipe.ask("من هو جمال أحمد حمزة خاشقجي؟")  # extractive without generation.model
    """

    def __init__(
        self,
        config: PipelineConfig,
        *,
        workspace: Workspace,
        progress: Progress | None = None,
        llm: LLMConfig | None = None,
    ) -> None:
        self.config = config
        self.workspace = workspace
        self.progress = progress
        self.llm = llm
        self._embedder: CachedEmbedder | None = None
        self._reranker: Reranker | None = None
        self._generator: Generator | None = None
        self._handle: IndexHandle | None = None
        self._retriever: Retriever | None = None
        self._chunks: Sequence[Chunk] = ()
        self.searched = 0.0
        """Seconds this pipeline's rankings spent in index searches (a memoized search costs none)."""

    @classmethod
    def from_config(
        cls,
        config: PipelineConfig | Mapping[str, Any] | str | Path,
        *,
        workdir: str | Path = DEFAULT_WORKDIR,
        qdrant: str | None = None,
        api_key: str | None = None,
        progress: Progress | None = None,
        llm: LLMConfig | None = None,
    ) -> Pipeline:
        """``config`` is a PipelineConfig, a dict of it, or a YAML path; ``qdrant`` None means Qdrant Edge."""
        if isinstance(config, (str, Path)):
            config = load_pipeline_config(config)
        elif not isinstance(config, PipelineConfig):
            config = PipelineConfig.from_dict(dict(config))
        config = config.prompt_resolved(base=None)  # a path relative to where the process runs
        workspace = Workspace.get(workdir, qdrant, api_key=api_key)
        return cls(config, workspace=workspace, progress=progress, llm=llm)

    @property
    def workdir(self) -> Path:
        """Where its indexes, embeddings and LLM replies are kept."""
        return self.workspace.workdir

    @property
    def embedder(self) -> CachedEmbedder:
        """The config's embedding model, loaded on first use, its vectors cached under ``workdir``."""
        if self._embedder is None:
            on_progress = None
            if self.progress is not None:
                hook = self.progress
                on_progress = lambda done, total: hook("encode", done, total)  # noqa: E731
            self._embedder = CachedEmbedder(
                shared_embedder(self.config.embedding), self.workspace.embeddings, on_progress=on_progress
            )
        return self._embedder

    @property
    def cache_stats(self) -> dict[str, int]:
        """Counts of cached work computed and reused so far."""
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
    def handle(self) -> IndexHandle:
        """The open index: the one ``index`` opened, else the newest saved in the work dir for this
        config (reopened without reading the corpus); a ComposerError when there is none."""
        if self._handle is None:
            identity = self.embedder.identity if self.config.needs_dense_index else None
            self._use(reopen_newest(self.workspace, self.config.index_settings(), identity,
                                    spill=self.workspace.workdir / SCRATCH, progress=self.progress))
        return self._handle  # type: ignore[return-value]  # set by _use

    @property
    def key(self) -> str:
        """The open index's key (corpus, chunking and embedding settings)."""
        return self.handle.key

    @property
    def saved_indexes(self) -> Path:
        """Where each built index's chunks and fitted BM25 are saved (``composer.pipeline.saved``)."""
        return self.workspace.workdir / SAVED_DIR

    def index(self, corpus: Corpus) -> IndexInfo:
        """Build the collection for this corpus and these index settings, or reuse the one already built
        (opened once per process; later pipelines on the same key reuse the open one). An index built
        before is reopened from what its build saved: the corpus is neither chunked nor analysed again.

        Args:
            corpus: The documents to search.

        Returns:
            The index's key, its number of chunks and whether it was reused.

        Example:
            ::

                pipe.index(load_corpus("examples/arcd-sample/corpus.jsonl")).reused
        """
        started = time.perf_counter()
        before = self.cache_stats
        dense = self.config.needs_dense_index
        identity = self.embedder.identity if dense else None
        key = self.config.index_key(corpus.fingerprint(), identity)
        embedder = self.embedder if dense else None
        handle, reused = open_or_build_for(self.workspace, self.config, key, corpus, embedder,
                                           spill=self.workspace.workdir / SCRATCH, progress=self.progress)
        self._use(handle)
        after = self.cache_stats
        return IndexInfo(
            key=key,
            n_documents=len(corpus),
            n_chunks=len(handle.table),
            reused=reused,
            embeddings_computed=after["embeddings_computed"] - before["embeddings_computed"],
            embeddings_reused=after["embeddings_reused"] - before["embeddings_reused"],
            seconds=time.perf_counter() - started,
        )

    def _use(self, handle: IndexHandle) -> None:
        self._handle = handle
        self._chunks = handle.chunks
        self._retriever = None
        self.__dict__.pop("_chunk_by_id", None)

    def universe(self) -> Mapping[str, tuple[str, str]]:
        """Every indexed chunk as chunk_id -> (doc_id, text): the pool that answer matching judges."""
        return self.handle.table

    # -- retrieval -------------------------------------------------------------------------------

    def rank(self, questions: Iterable[Question]) -> tuple[Ranking, Latency]:
        """Each question's top ``retrieval.k`` chunks as a Ranking, and seconds per question per stage."""
        items = list(questions)
        store = self.workspace.candidates
        before = store.search_seconds
        ranking, latency = self.retriever.rank(items)
        self.searched += store.search_seconds - before
        if self.progress is not None:
            self.progress("query", len(items), len(items))
        return ranking, latency

    def retrieve(self, questions: Iterable[Question]) -> HitLists:
        """Top ``retrieval.k`` hits per question, after reranking. ``questions`` may be any iterable."""
        return self.rank(questions)[0].to_hit_lists()

    @property
    def searched_queries(self) -> dict[str, str]:
        """Question id -> the query searched for it in the last ``rank`` call (``SearchedQuery.text``)."""
        searched = self._retriever.searched if self._retriever is not None else {}
        return {qid: q.text for qid, q in searched.items()}

    def search(self, query: str, k: int | None = None, *, history: HistoryLike | None = None) -> list[Hit]:
        """Ranked chunks for one query string, best first.

        Args:
            query: The text to search for.
            k: How many hits (default: the config's ``retrieval.k``).
            history: The conversation's earlier turns, oldest first (``Turn``s or ``{role, text}`` /
                ``{role, content}`` messages): searched as the ``conversation:`` section says.

        Returns:
            The hits: id, score, text and doc_id.

        Example:
            ::

                [h.doc_id for h in pipe.search("متى ولد جمال خاشقجي؟", k=3)]
        """
        q = Question(id="query", question=query, history=history_turns(history))
        return self._at(k).retrieve([q])["query"]

    async def asearch(self, query: str, k: int | None = None, *, history: HistoryLike | None = None
                      ) -> list[Hit]:
        """``search`` without blocking the caller's event loop (it runs in a thread).

        Args:
            query: The text to search for.
            k: How many hits (default: the config's ``retrieval.k``).
            history: The conversation's earlier turns, as ``search`` takes them.

        Returns:
            The hits, as ``search`` returns them.

        Example:
            ::

                hits = await pipe.asearch("متى ولد جمال خاشقجي؟")
        """
        return await asyncio.to_thread(self.search, query, k, history=history)

    def ask(self, question: str, *, history: HistoryLike | None = None) -> Answer:
        """Retrieve, then answer ``question`` from its top ``generation.max_contexts`` chunks.

        Args:
            question: The question's text.
            history: The conversation's earlier turns, oldest first (``Turn``s or ``{role, text}`` /
                ``{role, content}`` messages): searched as ``conversation:`` says, shown to the answerer.

        Returns:
            The answer's ``text`` (None if generation failed; ``result`` says why), ``contexts``, ``hits``
            and ``citations`` (to cite), ``language`` and ``refusal``.

        Example:
            ::

                answer = pipe.ask("من هو جمال أحمد حمزة خاشقجي؟")
                print(answer.text, answer.citations)
        """
        q = Question(id="question", question=question, history=history_turns(history))
        ranking, _ = self.rank([q])
        answer = self.answer([q], ranking)[q.id]
        hits = tuple(ranking.hits(0))
        citations = tuple(dict.fromkeys(self.citation(h.id) for h in hits[: len(answer.contexts) or None]))
        return dataclasses.replace(answer, hits=hits, citations=citations)

    def citation(self, chunk_id: str) -> str:
        """How to cite an indexed chunk: ``guide.pdf, page 3`` where pages are known, else its document."""
        chunk = self._chunk_by_id.get(chunk_id)
        return chunk.citation if chunk is not None else chunk_id

    @cached_property
    def _chunk_by_id(self) -> dict[str, Chunk]:
        return {c.id: c for c in self._chunks}

    async def aask(self, question: str, *, history: HistoryLike | None = None) -> Answer:
        """``ask`` without blocking the caller's event loop (it runs in a thread).

        Args:
            question: The question's text.
            history: The conversation's earlier turns, as ``ask`` takes them.

        Returns:
            The answer, as ``ask`` returns it.

        Example:
            ::

                answer = await pipe.aask("من هو جمال أحمد حمزة خاشقجي؟")
        """
        return await asyncio.to_thread(self.ask, question, history=history)

    def _at(self, k: int | None) -> Pipeline:
        """This pipeline, or (for another ``k``) a twin sharing its index and every cache."""
        if k is None or k == self.config.retrieval.k:
            return self
        if k < 1:
            raise ComposerError(f"k must be at least 1, got {k}")
        retrieval = self.config.retrieval.model_copy(update={"k": k})
        twin = Pipeline(self.config.model_copy(update={"retrieval": retrieval}), workspace=self.workspace,
                        progress=self.progress, llm=self.llm)
        twin._use(self.handle)
        twin._embedder = self._embedder
        twin._reranker, twin._generator = self._reranker, self._generator
        return twin

    @property
    def retriever(self) -> Retriever:
        """The config's search (BM25, dense or hybrid), built on first use."""
        if self._retriever is None:
            cfg = self.config
            self._retriever = Retriever(
                cfg.retrieval,
                index_branches(self.handle, self.workspace.backend,
                               self.embedder if self.handle.dim is not None else None),
                self.workspace.candidates,
                reranker=self.reranker,
                reranks=cfg.rerank.method != "none",
                expander=self.expander,
                rrf_k_expansion=cfg.retrieval.rrf_k,
                floor=self.workspace.depth,
                conversation=self.conversation,
            )
        return self._retriever

    @property
    def conversation(self) -> ConversationStage:
        """The ``conversation:`` stage: what each question searches, given its history."""
        cfg = self.config.conversation
        llm = self._helper_llm(cfg.model) if cfg.rewrite == "llm" else None
        return ConversationStage(cfg, llm, memo=self.workspace.rewrites)

    @property
    def reranker(self) -> Reranker:
        """The config's reranker, built on first use."""
        if self._reranker is None:
            cfg = self.config.rerank
            embedder = self.embedder if cfg.method == "mmr" else None
            llm = self._helper_llm(cfg.model) if cfg.method == "llm" else None
            self._reranker = make_reranker(
                cfg, cache=self.workspace.rerank_scores, embedder=embedder, llm=llm
            )
        return self._reranker

    @property
    def expander(self) -> QueryExpander | None:
        """None unless expansion is configured and applies (HyDE never touches BM25-only search)."""
        qe = self.config.query_expansion
        if qe.method == "none" or (qe.method == "hyde" and self.config.retrieval.mode == "bm25"):
            return None
        return QueryExpander(self._helper_llm(), qe.method, qe.n, memo=self.workspace.expansions)

    # -- answers ---------------------------------------------------------------------------------

    can_answer = True
    """Always: by the configured LLM, else by the offline extractive answerer."""

    @property
    def failed(self) -> Mapping[str, StageError]:
        """The questions of the last ``rank`` whose conversation rewrite failed (searched by ``concat``);
        an index search that fails is an error of the run, not a sample."""
        return self._retriever.failed if self._retriever is not None else {}

    @property
    def generator_model(self) -> str | None:
        """The answering LLM (None: no generation model configured)."""
        return self.config.generation.model

    @property
    def answerer(self) -> str:
        """What answers, as reports name it: ``llm:<model>`` or ``extractive``."""
        model = self.config.generation.model
        return f"llm:{model}" if model else "extractive"

    def batched(self, answering: bool) -> bool:
        """Whether ranking or answering calls an LLM (rewrite, expansion, LLM reranking, generation): scored
        batch by batch then, so a pruner can stop a poor trial before it pays for the rest."""
        cfg = self.config
        return (
            cfg.conversation.rewrite == "llm"
            or cfg.query_expansion.method != "none"
            or cfg.rerank.method == "llm"
            or (answering and cfg.generation.model is not None)
        )

    @property
    def generator_llm(self) -> LLMConfig | None:
        """The generator's settings (None: extractive answers)."""
        return self.config.generation.llm_config(self.llm)

    @property
    def generator(self) -> Generator | None:
        """The answering LLM's generator, built on first use; None without an LLM."""
        if self._generator is None and (cfg := self.generator_llm) is not None:
            gen = self.config.generation
            self._generator = Generator(self.workspace.client(cfg), gen.template, gen.prompt)
        return self._generator

    def answer(
        self,
        questions: Iterable[Question],
        ranking: Ranking,
        *,
        max_failures: int | None = None,
        on_answer: AnswerHook | None = None,
    ) -> dict[str, Answer]:
        """Question id -> Answer from the question's top ``generation.max_contexts`` chunks in ``ranking``,
        by the LLM generator (``generation.model``) or the offline extractive answerer, memoized (see
        ``composer.pipeline.answers.memoized_answers``). A failed generation: an Answer with ``text`` None."""
        return memoized_answers(questions, ranking, self.config.generation, self.generator,
                                self.workspace.answers, max_failures=max_failures, on_answer=on_answer)

    def _helper_llm(self, model: str | None = None) -> LLMClient:
        """The client for conversation rewrites, query expansion and LLM reranking: ``model`` (default the
        generator's) at temperature 0, so every trial asking the same shares the cached reply whatever its
        answer temperature."""
        base = self.generator_llm or self.llm
        config = helper_config(base, model)
        if config is None:
            raise ComposerError(
                "LLM rewrites, query expansion and LLM reranking need an LLM: set generation.model"
            )
        return self.workspace.client(config)

    # -- frameworks ------------------------------------------------------------------------------

    def as_langchain_retriever(self, k: int | None = None) -> Any:
        """This pipeline as a LangChain retriever (needs the ``langchain`` extra).

        Args:
            k: Hits per query (default: the config's ``retrieval.k``).

        Returns:
            A ``langchain_core`` ``BaseRetriever`` whose Documents carry id, doc_id, score and citation.

        Example:
            ::

                chain = pipe.as_langchain_retriever(k=3) | format_docs
        """
        from composer.adapters import langchain_retriever

        return langchain_retriever(self, k)

    def as_llamaindex_retriever(self, k: int | None = None) -> Any:
        """This pipeline as a LlamaIndex retriever (needs the ``llamaindex`` extra).

        Args:
            k: Hits per query (default: the config's ``retrieval.k``).

        Returns:
            A ``llama_index.core`` ``BaseRetriever`` of NodeWithScore (metadata: id, doc_id, score, citation).

        Example:
            ::

                engine = RetrieverQueryEngine.from_args(pipe.as_llamaindex_retriever(k=3), llm=llm)
        """
        from composer.adapters import llamaindex_retriever

        return llamaindex_retriever(self, k)
