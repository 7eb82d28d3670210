"""Retrieval and answer metrics, match modes that decide what counts as relevant, and their statistics."""

from composer.metrics.answer import exact_match, is_refusal, overlap_faithfulness, token_f1
from composer.metrics.matching import (
    Matched,
    MatchedRanking,
    MatchMode,
    default_match_mode,
    match_hits,
    match_ranking,
)
from composer.metrics.retrieval import (
    RETRIEVAL_METRICS,
    hit_rate,
    metric_key,
    mrr,
    ndcg,
    precision,
    recall,
    relevance,
)
from composer.metrics.scorers import (
    AnswerScorer,
    ExactMatchScorer,
    OverlapFaithfulnessScorer,
    Score,
    TokenF1Scorer,
    default_scorers,
)
from composer.metrics.stats import bootstrap_ci, paired_bootstrap_ci

__all__ = [
    "RETRIEVAL_METRICS",
    "AnswerScorer",
    "ExactMatchScorer",
    "MatchMode",
    "Matched",
    "MatchedRanking",
    "OverlapFaithfulnessScorer",
    "Score",
    "TokenF1Scorer",
    "bootstrap_ci",
    "default_match_mode",
    "default_scorers",
    "exact_match",
    "hit_rate",
    "is_refusal",
    "match_hits",
    "match_ranking",
    "metric_key",
    "mrr",
    "ndcg",
    "overlap_faithfulness",
    "paired_bootstrap_ci",
    "precision",
    "recall",
    "relevance",
    "token_f1",
]
