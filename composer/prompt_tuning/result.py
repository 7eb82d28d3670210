"""What a prompt optimization found: its candidates, their lineage and scores, and the held-out verdict.

Each part converts to and from plain JSON (``to_dict``/``from_dict``): a finished optimization is stored
under its key, so a rerun reads it back and sends nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, cast

from composer.prompts import UserPrompt

Outcome = Literal["better", "worse", "no difference"]


@dataclass(frozen=True)
class Candidate:
    """One prompt GEPA tried: ``index`` 0 is the seed; ``parent`` the candidate it was proposed from."""

    index: int
    prompt: UserPrompt
    parent: int | None
    selection_score: float
    """The objective's composite, mean over the selection questions it was scored on."""
    scored_questions: int
    metrics: dict[str, float] = field(default_factory=dict)
    kept: bool = True
    """Whether GEPA kept it in its pool (it beat its parent on the minibatch it was tried on)."""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "prompt": self.prompt.model_dump(mode="json")}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Candidate:
        return cls(**{**data, "prompt": UserPrompt.model_validate(data["prompt"])})


@dataclass(frozen=True)
class Verdict:
    """The best candidate against its seed on the held-out split: the paired bootstrap the study's own
    held-out verdict uses (``Objective.difference``), over conversations where there are any."""

    outcome: Outcome
    seed_score: float
    best_score: float
    difference: float
    ci: tuple[float, float]
    n_questions: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        low, high = data["ci"]
        return cls(**{**data, "outcome": cast(Outcome, data["outcome"]), "ci": (float(low), float(high))})


@dataclass(frozen=True)
class PromptOptimization:
    """The outcome: ``registered`` (a ``prompts:/NAME/VERSION`` URI) and ``promoted`` only when the
    verdict is "better"; otherwise the seed stays and ``reason`` says why.

    Attributes:
        study: The study whose winner's prompt was optimized.
        seed: The candidate it started from (index 0).
        best: The best candidate on the selection questions (the seed when none beat it).
        candidates: Every candidate, kept or not, with its parent.
        pareto: The indexes of GEPA's Pareto set.
        verdict: The best against the seed on the held-out questions (None: not re-scored).
        registered: The new version's URI, when the verdict is "better".
        promoted: Whether the alias moved to it.
        reason: One line on what became of the seed.

    Example:
        ::

            result = composer.optimize_prompt("arabic-demo", experiment="experiments/arabic-llm.yaml")
            if result.registered is None:
                print(result.reason)  # the seed stays: ...
    """

    study: str
    seed: Candidate
    best: Candidate
    candidates: tuple[Candidate, ...]
    pareto: tuple[int, ...]
    verdict: Verdict | None
    registered: str | None
    promoted: bool
    reason: str
    requests: dict[str, int]
    """LLM requests sent, by purpose (``prompt_proposal``, ``prompt_eval``); 0 on a rerun."""
    seconds: float
    discarded: int = 0
    """Proposals refused by the template check (a missing ``{question}``...): never scored."""
    key: str = ""
    """What the result is stored under (``composer.prompt_tuning.stored.optimization_key``)."""
    run_id: str | None = None
    """The optimization's MLflow run."""

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON data: what a study stores, so a rerun sends nothing."""
        return {
            **{k: v for k, v in asdict(self).items() if k not in ("seed", "best", "candidates", "verdict")},
            "seed": self.seed.index,
            "best": self.best.index,
            "candidates": [c.to_dict() for c in self.candidates],
            "pareto": list(self.pareto),
            "verdict": self.verdict.to_dict() if self.verdict else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PromptOptimization:
        """The result ``to_dict`` wrote."""
        candidates = tuple(Candidate.from_dict(c) for c in data["candidates"])
        by_index = {c.index: c for c in candidates}
        verdict = data.get("verdict")
        return cls(**{
            **data,
            "seed": by_index[data["seed"]],
            "best": by_index[data["best"]],
            "candidates": candidates,
            "pareto": tuple(data["pareto"]),
            "verdict": Verdict.from_dict(verdict) if verdict else None,
            "requests": {k: int(v) for k, v in data["requests"].items()},
        })
