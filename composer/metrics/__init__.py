"""Retrieval and answer metrics, match modes that decide what counts as relevant, and their statistics."""

from composer.metrics.answer import exact_match, is_refusal, overlap_faithfulness, token_f1
from composer.metrics.matching import JudgedRanking, MatchMode, default_match_mode, judge, trec_order
from composer.metrics.retrieval import RETRIEVAL_METRICS, hit_rate, metric_key, mrr, ndcg, precision, recall
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
    "JudgedRanking",
    "MatchMode",
    "OverlapFaithfulnessScorer",
    "Score",
    "TokenF1Scorer",
    "bootstrap_ci",
    "default_match_mode",
    "default_scorers",
    "exact_match",
    "hit_rate",
    "is_refusal",
    "judge",
    "metric_key",
    "mrr",
    "ndcg",
    "overlap_faithfulness",
    "paired_bootstrap_ci",
    "precision",
    "recall",
    "token_f1",
    "trec_order",
]
