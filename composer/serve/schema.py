"""The service's request and response bodies. Requests refuse unknown fields, so a misspelt ``"kk"`` is a
422 naming it, never a silent default; the OpenAI request accepts (and ignores) the sampling fields an
OpenAI client sends, since the pipeline's config fixes those."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchRequest(Strict):
    question: str = Field(description="The text to search for.")
    k: int | None = Field(None, description="How many hits (default: the config's retrieval.k).")


class AskRequest(Strict):
    question: str = Field(description="The question to answer.")


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
    """An OpenAI chat request: the last user message is the question, earlier turns are not read."""

    model: str | None = None
    messages: list[ChatMessage]
    stream: bool = False
    n: int = Field(1, ge=1, le=1, description="One choice: the pipeline's answer.")
    stream_options: dict[str, Any] | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    user: str | None = None


class ErrorResponse(BaseModel):
    detail: str = Field(description="What was wrong, on one line.")
