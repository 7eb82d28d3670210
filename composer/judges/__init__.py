"""LLM judges (faithfulness, answer correctness, 1-5 rating, relevancy, context precision and recall),
refusal metrics, and ``answer_and_judge``: the LLM half of a trial."""

from composer.judges.base import EmbedFn, JudgeError, LLMJudge, Verdict
from composer.judges.config import JudgeConfig
from composer.judges.context import ContextPrecisionJudge, ContextRecallJudge, average_precision
from composer.judges.correctness import AnswerCorrectnessJudge, CorrectnessWeights, statement_f1
from composer.judges.evaluate import (
    DEFAULT_JUDGE_METRICS,
    GENERATION_METRICS,
    JUDGE_METRICS,
    REFUSAL_METRICS,
    AnswerJudgeResult,
    FailureBudgetExceeded,
    JudgeSettings,
    SampleResult,
    aanswer_and_judge,
    allowed_failures,
    answer_and_judge,
    check_failure_budget,
    make_judges,
    require_llm,
)
from composer.judges.faithfulness import FaithfulnessJudge
from composer.judges.rating import RatingJudge, normalize_rating, rating_out_of_5
from composer.judges.refusal import answer_refusal_rate, refusal_accuracy
from composer.judges.relevancy import AnswerRelevancyJudge

__all__ = [
    "DEFAULT_JUDGE_METRICS",
    "GENERATION_METRICS",
    "JUDGE_METRICS",
    "REFUSAL_METRICS",
    "AnswerCorrectnessJudge",
    "AnswerJudgeResult",
    "AnswerRelevancyJudge",
    "ContextPrecisionJudge",
    "ContextRecallJudge",
    "CorrectnessWeights",
    "EmbedFn",
    "FailureBudgetExceeded",
    "FaithfulnessJudge",
    "JudgeConfig",
    "JudgeError",
    "JudgeSettings",
    "LLMJudge",
    "RatingJudge",
    "SampleResult",
    "Verdict",
    "aanswer_and_judge",
    "allowed_failures",
    "answer_and_judge",
    "answer_refusal_rate",
    "average_precision",
    "check_failure_budget",
    "make_judges",
    "normalize_rating",
    "rating_out_of_5",
    "refusal_accuracy",
    "require_llm",
    "statement_f1",
]
