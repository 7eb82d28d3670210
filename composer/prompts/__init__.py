"""A team's own prompts: templates written with ``{placeholders}``, per language, from a file or from
MLflow's Prompt Registry, checked when loaded and resolved to their text before anything is sent.

The package sits below ``generation`` and ``judges`` (which fill the templates) and above ``llm`` (whose
``PromptTemplate`` fences data): a ``UserPrompt`` is the resolved text plus where it came from, what a
trial records and an export writes, so a fresh process sends exactly that prompt without the registry.
"""

from composer.prompts.registry import load_registered, register_prompt, set_alias
from composer.prompts.resolve import resolve_prompt
from composer.prompts.spec import PROMPT_KEYS, PromptMessages, PromptRef, UserPrompt
from composer.prompts.template import check_messages, check_prompt, prompt_template

__all__ = [
    "PROMPT_KEYS",
    "PromptMessages",
    "PromptRef",
    "UserPrompt",
    "check_messages",
    "check_prompt",
    "load_registered",
    "prompt_template",
    "register_prompt",
    "resolve_prompt",
    "set_alias",
]
