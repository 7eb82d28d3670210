"""The service's request and response bodies. Requests refuse unknown fields, so a misspelt ``"kk"`` is a
422 naming it, never a silent default, and read types strictly (``"k": true`` is not 1, ``"stream": "yes"``
not true). The OpenAI request accepts (and ignores) the sampling fields an OpenAI client sends, since the
pipeline's config fixes those, and refuses by name what would change the answer's form (``ChatRequest.
unsupported``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SearchRequest(Strict):
    question: str = Field(description="The text to search for.")
    k: int | None = Field(None, description="How many hits (default: the config's retrieval.k).")


class HistoryTurn(Strict):
    """One earlier turn of a conversation, as question files write it (``text``) or OpenAI (``content``)."""

    role: Literal["user", "assistant"]
    text: str | None = Field(None, description="What was said (or give it as `content`).")
    content: str | None = None


class AskRequest(Strict):
    question: str = Field(description="The question to answer.")
    history: list[HistoryTurn] | None = Field(
        None, description="The conversation's earlier turns, oldest first: a follow-up is searched with "
                          "them.")
    conversation_id: str | None = Field(
        None, description="The conversation, as traces group it (default: from its first user turn).")


class HitOut(BaseModel):
    id: str = Field(description="The chunk's id.")
    text: str | None
    score: float
    doc_id: str | None = Field(description="The document the chunk belongs to.")
    citation: str = Field(description="How to cite it: `guide.pdf, page 3`, else its document.")


class SearchResponse(BaseModel):
    hits: list[HitOut]
    latency_ms: float = Field(description="The pipeline's own time for this request.")


class AskResponse(BaseModel):
    answer: str | None = Field(description="None when generation failed (`error` says why).")
    contexts: list[str]
    hits: list[HitOut]
    citations: list[str]
    language: str
    refusal: bool
    error: str | None = None
    latency_ms: float = Field(description="The pipeline's own time for this request.")


class ChatMessage(Strict):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None


class ChatRequest(Strict):
    """An OpenAI chat request: the last user message is the question, the user and assistant messages before
    it its history (system, developer and tool messages are not read)."""

    model: str | None = None
    messages: list[ChatMessage]
    stream: bool = False
    n: int = Field(1, description="One choice: the pipeline's answer (n above 1 is refused).")
    stream_options: dict[str, Any] | None = None
    # Accepted and ignored: the pipeline's config fixes sampling, length and stopping.
    temperature: float | None = None
    top_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    user: str | None = None
    metadata: dict[str, Any] | None = Field(
        None, description="`conversation_id` here, as some clients send it, names the conversation.")
    conversation_id: str | None = Field(
        None, description="The conversation, as traces group it (default: from its first user message).")
    # Accepted only where they leave the answer as it is (see ``unsupported``).
    logprobs: bool | None = None
    top_logprobs: int | None = None
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None

    def unsupported(self) -> str | None:
        """Why this request asks for what the pipeline cannot give (a 422 naming the field), None when it
        can be answered as asked."""
        if self.n != 1:
            return f"n: {self.n} choices asked; the pipeline gives one answer (n: 1)"
        if self.logprobs or self.top_logprobs:
            return "logprobs: the pipeline's answer carries no token log-probabilities"
        kind = (self.response_format or {}).get("type", "text")
        if kind != "text":
            return f"response_format: {kind!r} is not supported; the answer is plain text (type 'text')"
        if self.tools:
            return "tools: the pipeline calls no tools; send the question without them"
        if self.tool_choice not in (None, "none", "auto"):
            return "tool_choice: the pipeline calls no tools ('none' or 'auto' only)"
        return None


class ErrorResponse(BaseModel):
    detail: str = Field(description="What was wrong, on one line.")
