"""Settings of a synthetic question set, as given on the command line or under ``synth:`` in an experiment.

Every field that shapes the generated set is part of ``fingerprint()``, so a set cached for one corpus and
one set of settings is never reused for another.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from composer.llm.config import LLMConfig
from composer.redact import scrub

Kind = Literal["factoid", "conceptual", "multi_hop", "unanswerable"]
KINDS: tuple[Kind, ...] = ("factoid", "conceptual", "multi_hop", "unanswerable")
EXTRACTIVE: frozenset[str] = frozenset({"factoid", "multi_hop"})
"""Kinds whose answer must be a span of a passage (found there, offsets recorded)."""

DEFAULT_MIX: dict[str, float] = {"factoid": 0.4, "conceptual": 0.3, "multi_hop": 0.2, "unanswerable": 0.1}


def parse_mix(text: str) -> dict[str, float]:
    """``"factoid=0.5,unanswerable=0.5"`` as a mapping; a kind left out gets weight 0.

    Raises ValueError with a readable message (the CLI reports it against ``--mix``).
    """
    mix: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep:
            raise ValueError(f"expected KIND=WEIGHT, got {part!r}")
        if name not in KINDS:
            raise ValueError(f"unknown kind {name!r}; kinds: {', '.join(KINDS)}")
        if name in mix:
            raise ValueError(f"kind {name!r} given twice")
        try:
            mix[name] = float(value)
        except ValueError:
            raise ValueError(f"weight of {name!r} is not a number: {value.strip()!r}") from None
    return check_mix(mix)


def check_mix(mix: dict[str, float]) -> dict[str, float]:
    """Weights normalized to sum 1 over every kind; negative, non-finite or all-zero weights are refused."""
    unknown = sorted(set(mix) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown kind(s) {unknown}; kinds: {', '.join(KINDS)}")
    if any(not (w >= 0 and w != float("inf")) for w in mix.values()):
        raise ValueError("weights must be finite numbers >= 0")
    total = sum(mix.values())
    if total <= 0:
        raise ValueError("give at least one kind a positive weight")
    return {k: mix.get(k, 0.0) / total for k in KINDS}


def allocate(n: int, mix: dict[str, float]) -> dict[str, int]:
    """``n`` questions split by weight (largest remainder, ties in KINDS order): the counts sum to ``n``."""
    exact = {k: n * mix.get(k, 0.0) for k in KINDS}
    counts: dict[str, int] = {k: int(v) for k, v in exact.items()}
    order = sorted(KINDS, key=lambda k: (-(exact[k] - counts[k]), KINDS.index(k)))
    for k in order[: n - sum(counts.values())]:
        counts[k] += 1
    return counts


class SynthConfig(BaseModel):
    """How many questions of which kinds, from which model, and the bounds the filters hold them to."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n: int = Field(default=200, ge=1, le=100_000, description="Questions to keep after the filters.")
    llm: LLMConfig = Field(description="The model that writes and checks the questions (a bare name works).")
    lang: Literal["auto", "ar", "fa", "en"] = Field(
        default="auto", description="Prompt language; auto: each passage's own language (ar, fa, else en)."
    )
    seed: int = 0
    mix: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_MIX))
    min_passage_chars: int = Field(default=150, ge=1)
    max_passage_chars: int = Field(default=1200, ge=50)
    min_question_chars: int = Field(default=10, ge=1)
    max_question_chars: int = Field(default=250, ge=10)
    max_short_answer_words: int = Field(
        default=12, ge=1, description="Longest factoid and multi-hop answer (they are spans)."
    )
    max_long_answer_words: int = Field(default=80, ge=1, description="Longest conceptual answer.")
    duplicate_jaccard: float = Field(
        default=0.8,
        gt=0.0,
        le=1.0,
        description="Normalized-token Jaccard at which a question is a near-duplicate.",
    )
    closed_book_f1: float = Field(
        default=0.6,
        gt=0.0,
        le=1.0,
        description="Token F1 between the model's answer without the passage and the reference at which a "
        "question counts as answerable without the passage.",
    )
    max_attempts: float = Field(
        default=3.0,
        ge=1.0,
        description="Generation calls allowed, as a multiple of n (over-generation bound).",
    )
    conversations: int = Field(
        default=0,
        ge=0,
        le=100_000,
        description="Conversations to write instead of single questions (0: a question set; n and mix "
        "then do not apply).",
    )
    follow_ups: int = Field(
        default=2, ge=1, le=8, description="Follow-up questions asked after a conversation's first question."
    )

    @field_validator("llm", mode="before")
    @classmethod
    def _bare_model(cls, value: Any) -> Any:
        return {"model": value} if isinstance(value, str) else value

    @field_validator("mix")
    @classmethod
    def _mix(cls, value: dict[str, float]) -> dict[str, float]:
        return check_mix(value)

    @model_validator(mode="after")
    def _bounds(self) -> SynthConfig:
        if self.min_passage_chars > self.max_passage_chars:
            raise ValueError("min_passage_chars is above max_passage_chars")
        if self.min_question_chars > self.max_question_chars:
            raise ValueError("min_question_chars is above max_question_chars")
        return self

    def targets(self) -> dict[str, int]:
        return allocate(self.n, self.mix)

    def fingerprint(self) -> str:
        """Hash of everything that shapes the set: the model and its endpoint and sampling parameters, not
        its timeout, concurrency, retries or key variable (they change how the set is fetched, not what)."""
        llm = self.llm.model_dump(
            include={"model", "api_base", "temperature", "max_tokens", "params"}, mode="json"
        )
        # a question set's fingerprint is what it was before conversations existed: its cache stays valid
        talk = set() if self.conversations else {"conversations", "follow_ups"}
        data = {**self.model_dump(exclude={"llm", *talk}, mode="json"), "llm": llm}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode("utf-8")).hexdigest()[:16]

    def public(self) -> dict[str, Any]:
        """The settings for reports and MLflow params: no key, only the name of its variable, and no
        password or key in the endpoint's URL."""
        return scrub(
            {
                **self.model_dump(exclude={"llm"}, mode="json"),
                "llm": self.llm.model_dump(exclude={"price", "prices"}, mode="json"),
            }
        )
