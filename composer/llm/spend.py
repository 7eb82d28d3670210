"""LLM requests by purpose: what a study, an evaluation or a generation sent, and why.

A trial's calls are counted on its record (whichever worker ran it); everything else a run sends
(the preflight test request, the held-out and selection re-scores, question generation) is counted
here, so the totals a run reports are the requests the provider saw, not only the trials' share.
Code that sends requests for a purpose says so with ``purpose(name)``; a run counts them with
``Spend().counting()``. Purposes nest: a block's requests count for the innermost purpose only.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from composer.llm.usage import Usage, track_usage

PURPOSES: tuple[str, ...] = (
    "preflight", "synth", "trial", "conversation_rewrite", "selection", "held_out", "eval", "prompt_proposal",
    "prompt_eval",
)
"""The purposes, in the order a run sends them (and reports them)."""
SHOWN = ("llm_calls", "llm_requests", "llm_cost_usd")
"""The counters reported per purpose (``llm_calls_<purpose>``...): the rest stay in the totals."""


@dataclass
class Spend:
    """Usage counters by purpose; ``track(purpose)`` counts a block's calls, ``add`` merges counted ones."""

    by_purpose: dict[str, dict[str, float]] = field(default_factory=dict)

    @contextmanager
    def counting(self) -> Iterator[Spend]:
        """Make this the Spend that ``purpose`` blocks count into, for the block."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)

    @contextmanager
    def track(self, purpose: str) -> Iterator[Usage]:
        """Count every LLM call of the block (and the tasks it starts) under ``purpose``, less those of
        the purposes tracked inside it."""
        inner: list[dict[str, float]] = []
        token = _OPEN.set((*_OPEN.get(), inner))
        with track_usage() as usage:
            try:
                yield usage
            finally:
                _OPEN.reset(token)
                failed = {f"llm_failed_requests_{kind}": n for kind, n in usage.failed_attempts.items()}
                counted = {**usage.to_dict(), **failed}
                if enclosing := _OPEN.get():
                    enclosing[-1].append(counted)
                for nested in inner:
                    counted = {k: v - nested.get(k, 0) for k, v in counted.items()}
                self.add(purpose, counted)

    def add(self, purpose: str, usage: Mapping[str, float]) -> None:
        """Add ``usage`` (``Usage.to_dict`` numbers) to ``purpose``; a purpose with no call stays out."""
        if not usage.get("llm_calls") and not usage.get("llm_requests"):
            return
        mine = self.by_purpose.setdefault(purpose, {})
        for name, value in usage.items():
            mine[name] = round(mine.get(name, 0.0) + float(value), 8)  # no float noise in a cost

    def totals(self) -> dict[str, float]:
        """Every purpose's counters summed: the run's LLM spending."""
        out: dict[str, float] = {}
        for usage in self.by_purpose.values():
            for name, value in usage.items():
                out[name] = round(out.get(name, 0.0) + value, 8)
        return out

    def ordered(self) -> dict[str, dict[str, float]]:
        """``by_purpose`` in the order the purposes are sent (unknown ones last)."""
        rank = {p: i for i, p in enumerate(PURPOSES)}
        return dict(sorted(self.by_purpose.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))


_ACTIVE: ContextVar[Spend | None] = ContextVar("composer_llm_spend", default=None)
_OPEN: ContextVar[tuple[list[dict[str, float]], ...]] = ContextVar("composer_llm_purposes", default=())


@contextmanager
def purpose(name: str) -> Iterator[None]:
    """Count the block's LLM calls under ``name`` in the Spend that is ``counting`` (none: uncounted)."""
    spend = _ACTIVE.get()
    if spend is None:
        yield
        return
    with spend.track(name):
        yield


def purpose_metrics(by_purpose: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Flat metrics for MLflow: ``llm_calls_<purpose>``, ``llm_requests_<purpose>``,
    ``llm_cost_usd_<purpose>``."""
    out: dict[str, float] = {}
    for purpose, usage in by_purpose.items():
        for name in SHOWN:
            out[f"{name}_{purpose}"] = float(usage.get(name, 0.0))
    return out


def purpose_line(by_purpose: Mapping[str, Mapping[str, float]]) -> str:
    """One line for a terminal: requests sent by purpose, "preflight 1 · trial 96 · held-out 20"."""
    parts = [f"{p.replace('_', '-')} {u.get('llm_requests', 0):.0f}" for p, u in by_purpose.items()]
    return " · ".join(parts) if parts else "none"
