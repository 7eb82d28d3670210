"""``Pipeline.as_langchain_retriever`` and ``as_llamaindex_retriever`` inside each framework's own chain and
query engine (fake LLMs, mock embeddings: nothing downloads), and the error naming the extra to install."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import composer
from composer.pipeline.pipeline import Pipeline

CORPUS = Path(__file__).resolve().parents[2] / "examples" / "arcd-sample" / "corpus.jsonl"
QUESTION = "من هو جمال أحمد حمزة خاشقجي؟"


@pytest.fixture(scope="module")
def pipe(tmp_path_factory: pytest.TempPathFactory) -> Pipeline:
    return composer.load_pipeline({"retrieval": {"mode": "bm25", "k": 5}}, CORPUS,
                                  workdir=tmp_path_factory.mktemp("work"))


def test_a_langchain_lcel_chain_reads_the_pipelines_documents(pipe: Pipeline) -> None:
    from langchain_core.documents import Document
    from langchain_core.language_models.fake import FakeListLLM
    from langchain_core.prompts import PromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableParallel, RunnablePassthrough

    retriever = pipe.as_langchain_retriever(k=3)
    assert isinstance(retriever, BaseRetriever)
    expected = pipe.search(QUESTION, k=3)

    def format_docs(docs: list[Document]) -> str:
        return "\n".join(f"[{d.metadata['citation']}] {d.page_content}" for d in docs)

    llm = FakeListLLM(responses=["صحفي وإعلامي"])
    prompt = PromptTemplate.from_template("{context}\n\n{question}")
    chain = RunnableParallel(context=retriever | format_docs, question=RunnablePassthrough()) | prompt | llm
    assert chain.invoke(QUESTION) == "صحفي وإعلامي"
    docs = retriever.invoke(QUESTION)
    assert [d.id for d in docs] == [h.id for h in expected]
    assert docs[0].metadata == {"id": expected[0].id, "doc_id": "arcd-000-0", "score": expected[0].score,
                                "citation": "arcd-000-0"}
    assert docs[0].page_content == expected[0].text
    assert (retriever | format_docs).invoke(QUESTION).startswith("[arcd-000-0] ")


async def _abatch(pipe: Pipeline) -> list[list[str]]:
    docs = await pipe.as_langchain_retriever(k=2).abatch([QUESTION, QUESTION])
    return [[d.id or "" for d in found] for found in docs]


def test_the_langchain_retriever_answers_async_calls(pipe: Pipeline) -> None:
    import asyncio

    expected = [h.id for h in pipe.search(QUESTION, k=2)]
    assert asyncio.run(_abatch(pipe)) == [expected, expected]


def test_a_llamaindex_query_engine_reads_the_pipelines_nodes(pipe: Pipeline) -> None:
    from llama_index.core import Settings
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore

    Settings.llm = MockLLM(max_tokens=8)
    Settings.embed_model = MockEmbedding(embed_dim=8)
    retriever = pipe.as_llamaindex_retriever(k=3)
    assert isinstance(retriever, BaseRetriever)
    expected = pipe.search(QUESTION, k=3)
    response = RetrieverQueryEngine.from_args(retriever, llm=Settings.llm).query(QUESTION)
    nodes = response.source_nodes
    assert all(isinstance(n, NodeWithScore) for n in nodes)
    assert [n.node.node_id for n in nodes] == [h.id for h in expected]
    assert [n.score for n in nodes] == pytest.approx([h.score for h in expected])
    assert nodes[0].node.metadata["citation"] == "arcd-000-0" and nodes[0].node.get_content().startswith(
        expected[0].text or "")
    assert str(response)  # MockLLM's reply, synthesized over the pipeline's passages


def test_a_missing_framework_names_the_extra(pipe: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    from composer import adapters

    for module in ("langchain_core.retrievers", "llama_index.core.retrievers"):
        monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    adapters._langchain_class.cache_clear()
    adapters._llamaindex_class.cache_clear()
    try:
        with pytest.raises(composer.ComposerError,
                           match=r"needs langchain-core: pip install 'composer-rag\[langchain\]'"):
            pipe.as_langchain_retriever()
        with pytest.raises(composer.ComposerError,
                           match=r"needs llama-index-core: pip install 'composer-rag\[llamaindex\]'"):
            pipe.as_llamaindex_retriever()
    finally:
        adapters._langchain_class.cache_clear()
        adapters._llamaindex_class.cache_clear()
