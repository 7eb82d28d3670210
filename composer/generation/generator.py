"""LLM answers grounded in the retrieved passages, prompted in the question's language."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from composer.data.types import Hit, Question
from composer.errors import ConfigError
from composer.generation.prompts import ANSWER_TEMPLATES, REFUSALS
from composer.llm.client import LLMClient, Result
from composer.llm.prompt import PromptLanguage, numbered, prompt_language
from composer.llm.sync import run_sync


@dataclass(frozen=True)
class Answer:
    """The generated text (None when every attempt failed), the prompt language and the call's outcome."""

    text: str | None
    lang: PromptLanguage
    result: Result | None  # None: no passage to answer from, so the refusal was given without a call

    @property
    def failed(self) -> bool:
        return self.text is None


class Generator:
    """Answers (question, contexts) pairs with one template at one temperature: both are search dimensions.

    Also an ``Answerer`` (``answer(question, hits)``) for code that answers one question at a time.
    """

    name = "llm"

    def __init__(
        self,
        client: LLMClient,
        template: str = "grounded",
        temperature: float | None = None,
        max_contexts: int = 5,
    ) -> None:
        if template not in ANSWER_TEMPLATES:
            raise ConfigError(
                f"unknown prompt template {template!r}; expected one of {sorted(ANSWER_TEMPLATES)}",
                field="generation.template",
            )
        if max_contexts < 1:
            raise ConfigError("max_contexts must be >= 1", field="generation.max_contexts")
        self.client = client
        self.template = template
        self.temperature = temperature
        self.max_contexts = max_contexts

    def messages(self, question: str, contexts: Sequence[str]) -> list[dict[str, str]]:
        lang = prompt_language(question)
        passages = [" ".join(c.split()) for c in contexts[: self.max_contexts]]
        return ANSWER_TEMPLATES[self.template][lang].messages(contexts=numbered(passages), question=question)

    async def agenerate(self, question: str, contexts: Sequence[str]) -> Answer:
        lang = prompt_language(question)
        if not any(c.strip() for c in contexts):
            return Answer(REFUSALS[lang], lang, None)  # nothing to ground an answer in: no call to pay for
        params: dict[str, Any] = {} if self.temperature is None else {"temperature": self.temperature}
        result = await self.client.acomplete(
            self.messages(question, [c for c in contexts if c.strip()]), **params
        )
        text = result.text.strip() if result.ok and result.text is not None else None
        return Answer(text, lang, result)

    async def agenerate_many(self, items: Sequence[tuple[str, Sequence[str]]]) -> list[Answer]:
        return list(await asyncio.gather(*(self.agenerate(q, c) for q, c in items)))

    def generate_many(self, items: Sequence[tuple[str, Sequence[str]]]) -> list[Answer]:
        return run_sync(self.agenerate_many(items))

    def answer(self, question: Question, hits: Sequence[Hit]) -> str:
        """The ``Answerer`` protocol: "" when generation failed, which scorers count as unanswered."""
        generated = run_sync(self.agenerate(question.question, [h.text or "" for h in hits]))
        return generated.text or ""
