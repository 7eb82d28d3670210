"""A prompt as GEPA's candidate: one component per message the seed has (``default.system``,
``ar.user``...), so the reflection edits the team's own messages and nothing else; and the check every
candidate passes before it is scored."""

from __future__ import annotations

from composer.errors import ConfigError
from composer.prompts import PromptMessages, UserPrompt
from composer.prompts.template import check_prompt

PARTS = ("system", "user")


def to_components(prompt: UserPrompt) -> dict[str, str]:
    """``prompt``'s messages by component name (``<variant>.<system|user>``); an empty system message is
    a component too, so the reflection may write one where the team wrote none."""
    return {f"{key}.{part}": getattr(messages, part)
            for key, messages in prompt.variants().items() for part in PARTS}


def to_prompt(components: dict[str, str], seed: UserPrompt) -> UserPrompt:
    """The prompt a candidate's components make: the seed's variants with their text replaced; no
    ``source`` nor ``version`` (a candidate is nobody's registry version until it is registered)."""
    variants = {key: PromptMessages(system=components[f"{key}.system"], user=components[f"{key}.user"])
                for key in seed.variants()}
    return UserPrompt.model_validate(variants)


def template_error(prompt: UserPrompt) -> str | None:
    """Why ``prompt`` cannot be sent as an answer template (a missing ``{question}`` or ``{contexts}``,
    an unknown placeholder, an unbalanced brace), or None: a proposal that fails is never scored."""
    try:
        check_prompt(prompt, field="candidate")
    except ConfigError as exc:
        return str(exc)
    return None
