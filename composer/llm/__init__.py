"""Every LLM call Composer makes, through litellm: config, async client, cache, usage and failure counts."""

from composer.llm.cache import LLMCache, cache_key
from composer.llm.client import LLMClient, Messages, Result
from composer.llm.config import LLMConfig, TokenPrice, check_env_name, derive_config, helper_config
from composer.llm.faults import classify, scrub
from composer.llm.sync import run_sync
from composer.llm.usage import FAILURE_KINDS, FailureKind, Usage, track_usage

__all__ = [
    "FAILURE_KINDS",
    "FailureKind",
    "LLMCache",
    "LLMClient",
    "LLMConfig",
    "Messages",
    "Result",
    "TokenPrice",
    "Usage",
    "cache_key",
    "check_env_name",
    "classify",
    "derive_config",
    "helper_config",
    "run_sync",
    "scrub",
    "track_usage",
]
