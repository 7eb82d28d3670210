"""Finished optimizations kept under a key, so a rerun reads the result back and sends nothing.

The key hashes everything the result depends on: the seed's text, the config, the questions of both
splits and whatever the caller adds (the study's winner, its objective). Where results live is the
caller's choice (``ResultStore``): the study's own attributes (``composer.study.prompt_stage.StudyResults``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Protocol

from composer.data.types import QuestionSet
from composer.prompt_tuning.config import PromptTuningConfig
from composer.prompts import UserPrompt


def optimization_key(
    seed: UserPrompt, config: PromptTuningConfig, selection: QuestionSet, held_out: QuestionSet, *context: str
) -> str:
    """The hash a finished optimization is stored under; ``context`` adds what the caller's scores
    depend on (the winner's params, the objective...)."""
    parts = [seed.sha256, config.model_dump_json(), selection.fingerprint(), held_out.fingerprint(), *context]
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode("utf-8")).hexdigest()[:24]


class ResultStore(Protocol):
    """Where finished optimizations are kept, by key (``PromptOptimization.to_dict`` data)."""

    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, data: dict[str, Any]) -> None: ...
