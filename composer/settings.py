"""The base of every settings model: unknown keys are errors (a typo must not silently fall back to a
default) and settings are frozen (hashable, and never changed behind a trial's back)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
