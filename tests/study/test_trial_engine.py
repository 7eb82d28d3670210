"""The memoized trial engine: a pipeline that differs from an earlier one only in query-time settings pays
no Qdrant query; candidates fetched deeper slice to exactly what a shallow fetch returns; the same config on
the same data scores the same to the last digit, in a fresh work dir too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from composer.data import Corpus, QuestionSet, load_corpus, load_questions
from composer.evaluation import evaluate_pipeline
from composer.index import EdgeBackend
from composer.pipeline.config import PipelineConfig
from composer.pipeline.pipeline import Pipeline
from composer.pipeline.workspace import Workspace

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arcd-sample"


@pytest.fixture(scope="module")
def data() -> tuple[Corpus, QuestionSet]:
    corpus = load_corpus(SAMPLE / "corpus.jsonl")
    return corpus, load_questions(SAMPLE / "questions.jsonl", corpus=corpus)


class CountingEdge(EdgeBackend):
    """Qdrant Edge counting the searches that reach it."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.searches: list[str] = []

    def search_dense(self, name: str, queries: np.ndarray, k: int) -> Any:
        self.searches.append("dense")
        return super().search_dense(name, queries, k)

    def search_bm25(self, name: str, queries: Any, k: int) -> Any:
        self.searches.append("bm25")
        return super().search_bm25(name, queries, k)


def pipeline(workspace: Workspace, corpus: Corpus, **retrieval: Any) -> Pipeline:
    made = Pipeline(PipelineConfig.from_dict({"retrieval": retrieval}), workspace=workspace)
    made.index(corpus)
    return made


def test_a_trial_differing_only_in_query_time_settings_issues_no_qdrant_query(
    data: tuple[Corpus, QuestionSet], tmp_path: Path
) -> None:
    corpus, questions = data
    backend = CountingEdge(tmp_path / "qdrant")
    workspace = Workspace(tmp_path, backend)
    first = pipeline(workspace, corpus, mode="hybrid", k=10, fusion="rrf", prefetch=50)
    baseline = first.rank(questions)[0]
    assert sorted(backend.searches) == ["bm25", "dense"]  # one batch per branch for all 186 questions
    for settings in (
        {"mode": "hybrid", "k": 3, "fusion": "rrf", "prefetch": 50},
        {"mode": "hybrid", "k": 10, "fusion": "rrf", "rrf_k": 7, "prefetch": 50},
        {"mode": "hybrid", "k": 10, "fusion": "dbsf", "prefetch": 30},
        {"mode": "hybrid", "k": 5, "fusion": "convex", "normalization": "zscore", "weight": 0.37},
        {"mode": "dense", "k": 10},
    ):
        ranking = pipeline(workspace, corpus, **settings).rank(questions)[0]
        assert ranking.items.shape == (len(questions), settings["k"])
    assert sorted(backend.searches) == ["bm25", "dense"], "a slice of the cached lists needs no search"
    # BM25 alone searches a collection of its own (no dense vectors): once, then it too is sliced.
    for k in (10, 5, 3):
        pipeline(workspace, corpus, mode="bm25", k=k).rank(questions)
    assert sorted(backend.searches) == ["bm25", "bm25", "dense"]
    again = pipeline(workspace, corpus, mode="hybrid", k=10, fusion="rrf", prefetch=50).rank(questions)[0]
    assert np.array_equal(again.items, baseline.items) and np.array_equal(again.scores, baseline.scores)
    # A deeper prefetch than any fetch so far is the one thing that searches again.
    pipeline(workspace, corpus, mode="hybrid", k=10, fusion="rrf", prefetch=200).rank(questions)
    assert len(backend.searches) == 5
    backend.close()


@pytest.mark.parametrize("floor", [0, 100])
def test_a_deeper_fetch_slices_to_the_shallow_result(
    data: tuple[Corpus, QuestionSet], tmp_path: Path, floor: int
) -> None:
    """BM25 ties often: the top k of a list fetched 100 deep must be the top k a k-deep search gives."""
    corpus, questions = data
    shallow = Workspace(tmp_path / "a", EdgeBackend(tmp_path / "a" / "qdrant"))
    deep = Workspace(tmp_path / "b", EdgeBackend(tmp_path / "b" / "qdrant"))
    deep.depth = floor
    for k in (1, 3, 5):
        a = pipeline(shallow, corpus, mode="bm25", k=k, stem=False).rank(questions)[0]
        b = pipeline(deep, corpus, mode="bm25", k=k, stem=False).rank(questions)[0]
        assert np.array_equal(a.items, b.items) and np.array_equal(a.scores, b.scores)
    scores = pipeline(deep, corpus, mode="bm25", k=5, stem=False).rank(questions)[0].scores
    assert (scores[:, :-1] == scores[:, 1:]).any(), "the sample has ties: the check means something"
    shallow.backend.close()
    deep.backend.close()


CONFIGS = [
    {"retrieval": {"mode": "bm25", "k": 5}},
    {"retrieval": {"mode": "hybrid", "k": 10, "fusion": "convex", "normalization": "dbsf", "weight": 0.4}},
    {
        "chunking": {"method": "fixed_chars", "size": 400, "overlap": 100},
        "retrieval": {"mode": "dense", "k": 10},
        "rerank": {"method": "mmr", "lambda": 0.7},
    },
]


# The dense configurations encode the corpus once per fresh work dir (nothing cached): the slow tier.
@pytest.mark.parametrize("config", [pytest.param(c, id=i, marks=[pytest.mark.slow] if i != "bm25" else [])
                                    for c, i in zip(CONFIGS, ["bm25", "convex", "mmr"], strict=True)])
def test_the_same_config_scores_the_same_in_fresh_work_dirs(
    data: tuple[Corpus, QuestionSet], tmp_path: Path, config: dict[str, Any]
) -> None:
    corpus, questions = data
    means = []
    for name in ("first", "second"):
        workspace = Workspace(tmp_path / name, EdgeBackend(tmp_path / name / "qdrant"))
        made = Pipeline(PipelineConfig.from_dict(config), workspace=workspace)
        means.append(evaluate_pipeline(made, corpus, questions).means())
        workspace.backend.close()
    assert means[0] == means[1]  # to the last digit
