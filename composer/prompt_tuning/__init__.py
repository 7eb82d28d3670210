"""Prompt optimization (``composer tune-prompt``, ``composer.optimize_prompt``, the staged ``prompt``
stage): GEPA proposes answer prompts after reading a study winner's failures, each scored with the study's
own objective on minibatches of the selection split; the best is kept only when the held-out verdict
against its seed says it is better."""

from composer.prompt_tuning.config import PromptTuningConfig
from composer.prompt_tuning.result import Candidate, PromptOptimization, Verdict

__all__ = ["Candidate", "PromptOptimization", "PromptTuningConfig", "Verdict"]
