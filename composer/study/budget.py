"""The study's LLM budget (``stop: {max_cost_usd, max_llm_calls}``), shared by every worker through the
Optuna storage: a finished trial's spend is its record's ``llm_usage``, a running trial's what it
published after its last batch (``SPENT_ATTR``). Each trial checks the sum after every batch of
questions, so the study's spend passes the budget by at most one batch per worker running at once.
Before a study starts, its prices are checked (``check_prices``): a dollar budget counts only what it can
price."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from composer.errors import BudgetSpent, ConfigError, InputError
from composer.llm import Usage
from composer.llm.pricing import request_cost
from composer.record import TrialRecord
from composer.study import _optuna
from composer.study.experiment import StopConfig

if TYPE_CHECKING:
    import optuna

    from composer.study.data import StudyData

SPENT_ATTR = "composer.llm_spent"
"""Trial system attribute: a running trial's LLM spend so far, {"cost": dollars, "requests": n}."""


def limited(stop: StopConfig) -> bool:
    return stop.max_cost_usd is not None or stop.max_llm_calls is not None


def spent(trials: Sequence[optuna.trial.FrozenTrial]) -> tuple[float, int]:
    """Dollars and LLM requests the study's trials spent: finished ones from their records, the others
    from what they published."""
    cost, requests = 0.0, 0
    for t in trials:
        record = TrialRecord.of(t)
        usage: Mapping[str, float] = record.llm_usage if record is not None and t.state.is_finished() else {}
        if not usage:
            live = t.system_attrs.get(SPENT_ATTR) or {}
            usage = {"llm_cost_usd": live.get("cost", 0.0), "llm_requests": live.get("requests", 0)}
        cost += float(usage.get("llm_cost_usd", 0.0))
        requests += int(usage.get("llm_requests", 0))
    return cost, requests


def over(stop: StopConfig, cost: float, requests: int) -> str | None:
    """Why the budget is spent (None while it is not)."""
    if stop.max_cost_usd is not None and cost >= stop.max_cost_usd:
        return f"LLM budget spent: ${cost:.4f} of max_cost_usd ${stop.max_cost_usd:g} ({requests} requests)"
    if stop.max_llm_calls is not None and requests >= stop.max_llm_calls:
        return f"LLM budget spent: {requests} requests of max_llm_calls {stop.max_llm_calls} (${cost:.4f})"
    return None


def check(stop: StopConfig, trial: optuna.Trial, usage: Usage) -> None:
    """Publish the running trial's spend, then raise BudgetSpent when the study's spend reached a limit."""
    study = trial.study
    _optuna.set_system_attr(study, trial, SPENT_ATTR, {"cost": usage.cost, "requests": usage.requests})
    reason = over(stop, *spent(_optuna.all_trials(study)))
    if reason is not None:
        study.stop()
        raise BudgetSpent(f"{reason}: stopped after {usage.requests} of its requests")


def reason(stop: StopConfig, study: optuna.Study) -> str | None:
    """Why a finished study's budget stopped it, for the message it ends with (None: it did not)."""
    return over(stop, *spent(_optuna.all_trials(study))) if limited(stop) else None


def already_spent(stop: StopConfig, storage: str, name: str) -> str | None:
    """Why the stored study ``name`` has no budget left before this run starts (None: it has some, or it
    is new): a rerun then runs no trial and sends nothing, not even its test requests."""
    from composer.study._storage import load_study

    if not limited(stop):
        return None
    try:
        study = load_study(name, storage)
    except InputError:  # no study yet
        return None
    return reason(stop, study)


def check_prices(data: StudyData, stop: StopConfig | None) -> None:
    """Refuse, before any request, what would make dollars wrong: a key of ``llm.prices`` that names no
    model of the study (a misspelling: the model it meant stays unpriced), and, under ``stop`` with a
    ``max_cost_usd``, a model neither ``llm.prices`` nor litellm's price map prices (it would cost $0 to
    the budget, which then never stops the study). A factory's own LLMs are not Composer's to price."""
    if data.system is not None:
        return
    endpoints = data.llm_endpoints()
    models = {m for key in ("generation.model", "rerank.model") for m in data.space.possible(key)}
    known = sorted({c.model for c in endpoints} | {m for m in models if isinstance(m, str)})
    for key in data.llm.prices if data.llm is not None else {}:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.0)
            raise ConfigError(f"{key!r} is no model of this study" + (f"; did you mean {close[0]!r}?" if close
                              else " (it calls no LLM)"), field=f"llm.prices.{key}")
    if stop is None or stop.max_cost_usd is None:
        return
    unpriced = sorted({c.model for c in endpoints if request_cost(c, 1, 1) is None})
    if unpriced:
        raise ConfigError(
            f"a dollar budget cannot be kept: no price for {', '.join(unpriced)} (neither llm.prices nor "
            f"litellm's price map has one), so its requests would cost $0 to the budget; give one in USD per "
            f"million tokens, e.g. llm: {{prices: {{{unpriced[0]}: {{input: 0.15, output: 0.6}}}}}} "
            "(a self-hosted model: {input: 0, output: 0}), or cap requests with stop.max_llm_calls",
            field="stop.max_cost_usd",
        )
