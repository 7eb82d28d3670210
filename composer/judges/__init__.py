"""LLM judges (faithfulness, answer correctness, 1-5 rating, relevancy, context precision and recall),
refusal metrics, and ``judge_answers``: every judge over a batch of answers."""

from composer.judges.base import EmbedFn, JudgeError, LLMJudge, Verdict
from composer.judges.config import JudgeConfig
from composer.judges.context import ContextPrecisionJudge, ContextRecallJudge, average_precision
from composer.judges.correctness import AnswerCorrectnessJudge, CorrectnessWeights, statement_f1
from composer.judges.faithfulness import FaithfulnessJudge
from composer.judges.panel import (
    DEFAULT_JUDGE_METRICS,
    GENERATION_METRICS,
    JUDGE_METRICS,
    REFUSAL_METRICS,
    FailureBudget,
    FailureBudgetExceeded,
    JudgeSettings,
    SampleResult,
    ajudge_answers,
    allowed_failures,
    judge_answers,
    make_judges,
    require_llm,
)
from composer.judges.rating import RatingJudge, normalize_rating, rating_out_of_5
from composer.judges.relevancy import AnswerRelevancyJudge

__all__ = [
    "DEFAULT_JUDGE_METRICS",
    "GENERATION_METRICS",
    "JUDGE_METRICS",
    "REFUSAL_METRICS",
    "AnswerCorrectnessJudge",
    "AnswerRelevancyJudge",
    "ContextPrecisionJudge",
    "ContextRecallJudge",
    "CorrectnessWeights",
    "EmbedFn",
    "FailureBudget",
    "FailureBudgetExceeded",
    "FaithfulnessJudge",
    "JudgeConfig",
    "JudgeError",
    "JudgeSettings",
    "LLMJudge",
    "RatingJudge",
    "SampleResult",
    "Verdict",
    "ajudge_answers",
    "allowed_failures",
    "average_precision",
    "judge_answers",
    "make_judges",
    "normalize_rating",
    "rating_out_of_5",
    "require_llm",
    "statement_f1",
]
