"""Score a configured pipeline end to end: index (or reuse), retrieve, evaluate."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from composer.data.types import Corpus, QuestionSet
from composer.evaluation.evaluate import evaluate_run
from composer.evaluation.report import EvaluationReport
from composer.metrics.matching import MatchMode

if TYPE_CHECKING:
    from composer.pipeline.pipeline import Pipeline


def evaluate_pipeline(
    pipeline: Pipeline,
    corpus: Corpus,
    questions: QuestionSet,
    *,
    ks: Sequence[int] = (1, 3, 5, 10),
    match: MatchMode | None = None,
) -> EvaluationReport:
    """The report of ``evaluate_run`` plus the index key, pipeline config and cache counters in its meta.

    ``cache`` counts embeddings computed vs reused over indexing and querying, so a second identical run
    visibly encodes nothing.
    """
    info = pipeline.index(corpus)
    run, latency = pipeline.retrieve_timed(questions.questions)
    meta = {
        "index": {"key": info.key, "chunks": info.n_chunks, "reused": info.reused, "seconds": info.seconds},
        "pipeline": pipeline.config.to_dict(),
        "cache": pipeline.cache_stats,
    }
    return evaluate_run(
        questions,
        run,
        ks=ks,
        match=match,
        corpus=corpus,
        universe=pipeline.universe(),
        latency=latency,
        meta=meta,
    )
