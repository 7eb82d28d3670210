"""LLM answers grounded in the retrieved passages, prompted in the question's language."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from composer.data.types import Hit, Turn
from composer.errors import ConfigError
from composer.generation.prompts import ANSWER_TEMPLATES, FOLLOW_UP_TEMPLATES, REFUSALS
from composer.llm.client import LLMClient, Result
from composer.llm.prompt import PromptLanguage, conversation_language, numbered, transcript


def answer_messages(
    template: str, question: str, contexts: Sequence[str], history: Sequence[Turn] = ()
) -> list[dict[str, str]]:
    """The request that answers ``question`` from ``contexts`` with ``template``, in the question's
    language, the conversation so far (``history``) shown before it: the answer answers what the user
    said, in the conversation it was said in (what a trial sends, and what a cost estimate counts)."""
    lang = conversation_language(question, history)
    passages = numbered([" ".join(c.split()) for c in contexts])
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
    """Answers (question, contexts) pairs with one template; the model and its temperature are the
    client's (both search dimensions, as the template is)."""

    def __init__(self, client: LLMClient, template: str = "grounded") -> None:
        if template not in ANSWER_TEMPLATES:
            raise ConfigError(
                f"unknown prompt template {template!r}; expected one of {sorted(ANSWER_TEMPLATES)}",
                field="generation.template",
            )
        self.client = client
        self.template = template

    def messages(self, question: str, contexts: Sequence[str], history: Sequence[Turn] = ()
                 ) -> list[dict[str, str]]:
        return answer_messages(self.template, question, contexts, history)

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
