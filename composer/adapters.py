"""A Composer pipeline as a LangChain or LlamaIndex retriever, so the configuration a study found drops into
an existing chain or query engine. Each framework is an optional extra, imported on first use; its
retriever class is built once per process (it subclasses the framework's own ``BaseRetriever``, so the
framework's callbacks, tracing and composition all apply).

Hits come back as the framework's documents with ``id``, ``doc_id``, ``score`` and ``citation`` in their
metadata, best first.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

from composer.errors import ComposerError

if TYPE_CHECKING:
    from langchain_core.retrievers import BaseRetriever as LangChainRetriever
    from llama_index.core.retrievers import BaseRetriever as LlamaIndexRetriever

    from composer.data.types import Hit


class Searchable(Protocol):
    """What an adapter needs of a pipeline (``composer.pipeline.Pipeline`` is one): its search, sync and
    async, and a hit's citation. A Protocol, so that this module sits below the pipeline that offers it."""

    def search(self, query: str, k: int | None = None) -> list[Hit]: ...

    async def asearch(self, query: str, k: int | None = None) -> list[Hit]: ...

    def citation(self, chunk_id: str) -> str: ...


def langchain_retriever(pipeline: Searchable, k: int | None = None) -> LangChainRetriever:
    """``pipeline`` as a ``langchain_core`` retriever returning Documents.

    Args:
        pipeline: An indexed pipeline.
        k: Hits per query (default: the config's ``retrieval.k``).

    Raises:
        ComposerError: ``langchain-core`` is not installed (the ``langchain`` extra).

    Example:
        ::

            docs = pipe.as_langchain_retriever(k=3).invoke("متى ولد جمال خاشقجي؟")
    """
    retriever: LangChainRetriever = _langchain_class()(pipeline=pipeline, k=k)  # type: ignore[call-arg]
    return retriever


def llamaindex_retriever(pipeline: Searchable, k: int | None = None) -> LlamaIndexRetriever:
    """``pipeline`` as a ``llama_index.core`` retriever returning NodeWithScore.

    Args:
        pipeline: An indexed pipeline.
        k: Hits per query (default: the config's ``retrieval.k``).

    Raises:
        ComposerError: ``llama-index-core`` is not installed (the ``llamaindex`` extra).

    Example:
        ::

            nodes = pipe.as_llamaindex_retriever(k=3).retrieve("متى ولد جمال خاشقجي؟")
    """
    return _llamaindex_class()(pipeline, k)


def metadata(pipeline: Searchable, hit: Hit) -> dict[str, Any]:
    """What a framework document carries besides its text."""
    return {"id": hit.id, "doc_id": hit.doc_id, "score": hit.score, "citation": pipeline.citation(hit.id)}


def _missing(framework: str, package: str, extra: str) -> ComposerError:
    return ComposerError(f"the {framework} retriever needs {package}: pip install 'composer-rag[{extra}]'")


@cache
def _langchain_class() -> type[LangChainRetriever]:
    try:
        from langchain_core.callbacks import (
            AsyncCallbackManagerForRetrieverRun,
            CallbackManagerForRetrieverRun,
        )
        from langchain_core.documents import Document
        from langchain_core.retrievers import BaseRetriever
    except ImportError:
        raise _missing("LangChain", "langchain-core", "langchain") from None
    from pydantic import ConfigDict

    class ComposerRetriever(BaseRetriever):
        """A Composer pipeline's search, as LangChain Documents (metadata: id, doc_id, score, citation)."""

        model_config = ConfigDict(arbitrary_types_allowed=True)
        pipeline: Any
        k: int | None = None

        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            return [self._document(h) for h in self.pipeline.search(query, self.k)]

        async def _aget_relevant_documents(
            self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
        ) -> list[Document]:
            return [self._document(h) for h in await self.pipeline.asearch(query, self.k)]

        def _document(self, hit: Hit) -> Document:
            return Document(page_content=hit.text or "", metadata=metadata(self.pipeline, hit), id=hit.id)

    return ComposerRetriever


@cache
def _llamaindex_class() -> type[Any]:
    try:
        from llama_index.core.retrievers import BaseRetriever
        from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
    except ImportError:
        raise _missing("LlamaIndex", "llama-index-core", "llamaindex") from None

    class ComposerRetriever(BaseRetriever):
        """A Composer pipeline's search, as LlamaIndex nodes (metadata: id, doc_id, score, citation)."""

        def __init__(self, pipeline: Searchable, k: int | None = None) -> None:
            super().__init__()
            self.pipeline = pipeline
            self.k = k

        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            return [self._node(h) for h in self.pipeline.search(query_bundle.query_str, self.k)]

        async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            return [self._node(h) for h in await self.pipeline.asearch(query_bundle.query_str, self.k)]

        def _node(self, hit: Hit) -> NodeWithScore:
            node = TextNode(id_=hit.id, text=hit.text or "", metadata=metadata(self.pipeline, hit))
            return NodeWithScore(node=node, score=hit.score)

    return ComposerRetriever
