"""Chunking settings (a pipeline's ``chunking:`` section): how documents are cut into what is indexed."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from composer.settings import Strict


class ChunkingConfig(Strict):
    method: Literal["paragraph", "fixed_chars", "sentence", "recursive"] = "paragraph"
    size: int = Field(default=800, ge=50, le=20000, description="Target chunk length in characters.")
    overlap: int = Field(
        default=0,
        ge=0,
        description="At most this many characters (whole words or sentences) shared by consecutive chunks "
        "cut from one run of text; never across paragraphs.",
    )
    window: int = Field(
        default=0,
        ge=0,
        le=10,
        description="Sentence windows (sentence chunks only): the index holds each small chunk, a hit "
        "returns it with this many neighbouring chunks of its document on each side.",
    )
    respect: Literal["none", "page", "section"] = Field(
        default="none",
        description="Boundaries no chunk crosses: PDF pages and slides (page) or headings (section), as "
        "read from document folders; documents without them are chunked as a whole.",
    )

    # Cross-field checks are field validators on the later field, so errors name that key.
    @field_validator("overlap")
    @classmethod
    def _overlap_below_size(cls, overlap: int, info: ValidationInfo) -> int:
        size = info.data.get("size")
        if size is not None and overlap >= size:
            raise ValueError(f"overlap ({overlap}) must be smaller than size ({size})")
        return overlap

    @field_validator("window")
    @classmethod
    def _window_of_sentences(cls, window: int, info: ValidationInfo) -> int:
        method = info.data.get("method")
        if window and method != "sentence":
            raise ValueError(f"sentence windows need method 'sentence', not '{method}'")
        return window
