"""Score your own retriever with Composer: here bm25s over the bundled Arabic sample.

Any object with ``retrieve(question) -> list`` works (sync or async; add ``answer(question, contexts)``
for a RAG system); so do LangChain and LlamaIndex retrievers as they are. Run from the repository root:
``python examples/own_retriever.py``.
"""

from __future__ import annotations

from typing import Any

import bm25s

import composer
from composer.data import load_corpus

CORPUS = "examples/arcd-sample/corpus.jsonl"
QUESTIONS = "examples/arcd-sample/questions.jsonl"


class MyRetriever:
    """bm25s over the corpus: what a study tunes is its constructor's settings."""

    def __init__(self, k: int = 10, k1: float = 1.5, corpus: composer.Corpus | None = None) -> None:
        corpus = corpus if corpus is not None else load_corpus(CORPUS)
        self.ids, self.k = [d.id for d in corpus], k
        self.model = bm25s.BM25(k1=k1)
        self.model.index(bm25s.tokenize([d.text for d in corpus], show_progress=False), show_progress=False)

    def retrieve(self, question: str) -> list[dict[str, Any]]:
        found, scores = self.model.retrieve(bm25s.tokenize([question], show_progress=False), k=self.k,
                                            show_progress=False)
        return [{"id": self.ids[i], "score": float(s)} for i, s in zip(found[0], scores[0], strict=True)]


if __name__ == "__main__":
    corpus = load_corpus(CORPUS)
    report = composer.evaluate(MyRetriever(corpus=corpus), QUESTIONS, corpus)
    print(f"nDCG@10 {report.means()['ndcg@10']:.3f}")  # 0.764
    print(report.stats()["hit_rate@5"])  # MetricStats(mean=0.866, ci_low=0.817, ci_high=0.914, n=186)
    print(report.latency_ms()["retrieve"])  # per-question latency: mean, p50, p95
    report.save("report/")  # summary.json, samples.csv, traces.jsonl, error_rates.json
