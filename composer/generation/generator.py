"""LLM answers grounded in the retrieved passages, prompted in the question's language."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from composer.data.types import Hit, Turn
from composer.errors import ConfigError
from composer.generation.prompts import ANSWER_TEMPLATES, FOLLOW_UP_TEMPLATES, REFUSALS
from composer.llm.client import LLMClient, Result
from composer.llm.prompt import PromptLanguage, conversation_language, numbered, transcript
from composer.prompts.spec import PromptRef, UserPrompt
from composer.prompts.template import ANSWER_FIELDS, prompt_template


def answer_messages(
    template: str | UserPrompt, question: str, contexts: Sequence[str], history: Sequence[Turn] = ()
) -> list[dict[str, str]]:
    """The request that answers ``question`` from ``contexts`` with ``template`` (a built-in template's
    name, or a team's prompt), in the question's language, the conversation so far (``history``) shown
    before it: the answer answers what the user said, in the conversation it was said in (what a trial
    sends, and what a cost estimate counts).

    A team's prompt shows the conversation only where it has ``{history}`` (fenced as data, empty on a
    first turn): without it a follow-up is asked as the template reads, the team's template ruling."""
    lang = conversation_language(question, history)
    passages = numbered([" ".join(c.split()) for c in contexts])
    if isinstance(template, UserPrompt):
        variant = template.for_language(lang)
        return prompt_template(variant, lang, sorted(ANSWER_FIELDS)).messages(
            contexts=passages, question=question, history=transcript(history, lang))
    if history:
        return FOLLOW_UP_TEMPLATES[template][lang].messages(
            contexts=passages, conversation=transcript(history, lang), question=question
        )
    return ANSWER_TEMPLATES[template][lang].messages(contexts=passages, question=question)


@dataclass(frozen=True)
class Answer:
    """An answer, as ``Pipeline.ask`` returns it.

    Attributes:
        text: The answer (None when every attempt failed; ``result`` says why).
        lang: The prompt language (also ``language``).
        result: The LLM call's outcome (None: no call was made).
        contexts: The passages it was given (what the judges grade it against).
        hits: The ranked chunks the contexts came from.
        citations: Where the contexts come from, once each.

    Example:
        ::

            answer = pipe.ask("من هو جمال أحمد حمزة خاشقجي؟")
            if not answer.failed and not answer.refusal:
                print(answer.text, answer.citations)
    """

    text: str | None
    lang: PromptLanguage
    result: Result | None
    contexts: tuple[str, ...] = ()
    hits: tuple[Hit, ...] = ()
    """The ranked chunks the contexts came from (``Pipeline.ask`` fills them in)."""
    citations: tuple[str, ...] = ()
    """Where the contexts come from, once each: ``guide.pdf, page 3`` (``Pipeline.ask`` fills them in)."""

    @property
    def failed(self) -> bool:
        """Whether there is no answer (every attempt failed)."""
        return self.text is None

    @property
    def language(self) -> PromptLanguage:
        """The prompt language (``ar``, ``fa``, ``en``...)."""
        return self.lang

    @property
    def refusal(self) -> bool:
        """Whether the answer declines ("I don't know", "لا أعرف", "نمی‌دانم"...)."""
        from composer.metrics.refusal import is_refusal

        return self.text is not None and is_refusal(self.text)


class Generator:
    """Answers (question, contexts) pairs with one template, or with a team's resolved ``prompt`` in its
    place; the model and its temperature are the client's (both search dimensions, as the template and
    the prompt are)."""

    def __init__(self, client: LLMClient, template: str = "grounded", prompt: PromptRef | None = None
                 ) -> None:
        if template not in ANSWER_TEMPLATES:
            raise ConfigError(
                f"unknown prompt template {template!r}; expected one of {sorted(ANSWER_TEMPLATES)}",
                field="generation.template",
            )
        if isinstance(prompt, str):
            raise ConfigError(
                f"the prompt {prompt!r} is not resolved: load the config with composer.load_pipeline or "
                "Pipeline.from_config, or pass composer.prompts.resolve_prompt's result",
                field="generation.prompt",
            )
        self.client = client
        self.template = template
        self.prompt = prompt

    def messages(self, question: str, contexts: Sequence[str], history: Sequence[Turn] = ()
                 ) -> list[dict[str, str]]:
        return answer_messages(self.prompt or self.template, question, contexts, history)

    async def agenerate(self, question: str, contexts: Sequence[str], history: Sequence[Turn] = ()) -> Answer:
        lang = conversation_language(question, history)
        given = tuple(c for c in contexts if c.strip())
        if not given:
            return Answer(REFUSALS[lang], lang, None)  # nothing to ground an answer in: no call to pay for
        result = await self.client.acomplete(self.messages(question, given, history))
        text = result.text.strip() if result.ok and result.text is not None else None
        return Answer(text, lang, result, given)

    async def astream(
        self, question: str, contexts: Sequence[str], history: Sequence[Turn] = ()
    ) -> AsyncIterator[str | Answer]:
        """``agenerate``'s answer as the LLM writes it (``LLMClient.astream``): the text's pieces, then the
        Answer, whose text is the pieces joined and stripped (None, ``result`` saying why, when the call
        failed, even midway)."""
        lang = conversation_language(question, history)
        given = tuple(c for c in contexts if c.strip())
        if not given:
            yield REFUSALS[lang]
            yield Answer(REFUSALS[lang], lang, None)
            return
        stream = self.client.astream(self.messages(question, given, history))
        async for piece in stream:
            yield piece
        result = stream.result
        assert result is not None, "a stream that ended has its result"
        text = result.text.strip() if result.ok and result.text is not None else None
        yield Answer(text, lang, result, given)
