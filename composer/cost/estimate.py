"""What a study's LLM calls will cost, before it runs: requests, tokens and dollars per stage, per trial,
for the cheapest and the dearest configuration, and for the whole study.

Each configuration's requests for a sample of questions are built with the real prompts
(``composer.cost.calls``), their tokens counted with the model's tokenizer and priced as the client
prices them (``composer.llm.pricing``). A request the work dir's LLM cache holds costs nothing, and one
that several configurations send (an expansion, a judge's look at the same answer) is paid once, as the
cache has it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import fmean
from typing import Any

from composer.cost.calls import Call, Judge, question_calls
from composer.data.types import Question
from composer.llm.cache import LLMCache, cache_key
from composer.llm.config import LLMConfig
from composer.llm.pricing import count_text_tokens, count_tokens, request_cost
from composer.pipeline.config import PipelineConfig

SAMPLE_QUESTIONS = 8
"""Questions whose prompts are built and counted; the study's are priced at their mean."""
HELD_OUT_CONTENDERS = 2
"""The winner and the runner-up are re-scored on the held-out questions."""


@dataclass(frozen=True)
class StageCost:
    """One stage of a trial (query expansion, LLM rerank, generation, a judge), averaged over the
    configurations priced: what a trial adds to what the others asked (the cache serves a shared prompt)."""

    stage: str
    model: str
    calls_per_question: float
    questions: int
    input_tokens: float
    """Per call."""
    output_tokens: float
    """Per call."""
    usd_per_trial: float | None


@dataclass(frozen=True)
class ConfigCost:
    """One configuration's requests and dollars for one trial (None: a model without a price)."""

    params: dict[str, Any]
    requests_per_trial: float
    usd_per_trial: float | None


@dataclass(frozen=True)
class Estimate:
    """A study's LLM spending before it runs (``composer.optimize(..., estimate=True)``).

    Attributes:
        study: The study's name.
        questions: The selection questions every trial is scored on.
        held_out: The held-out questions the winner and the runner-up are re-scored on.
        trials: Trials left to run.
        finished: Trials the study already holds (never run again).
        configurations: Configurations of the space priced.
        stages: Per stage and model: calls per question, tokens per call, dollars per trial.
        cheapest: The configuration whose trial costs least.
        dearest: The configuration whose trial costs most.
        preflight: Test requests, one per endpoint.
        requests: What the provider would see: trials, held-out re-score and test requests.
        cached: Requests the work dir's LLM cache would answer (not in ``requests``).
        usd: The study's dollars; None when a model has no price (``unpriced`` names it).
        unpriced: Models neither the experiment nor litellm's price map prices.
        seconds_per_trial: A trial's wall time in its LLM requests, on average: each model's test-request
            latency times its requests, over its ``max_concurrency``; None when a model is untimed.
        seconds: The study's, as ``usd`` is summed; None when a model is untimed.
        untimed: Models whose test request was not answered (or not sent: no key yet).

    Example:
        ::

            est = composer.optimize("experiments/arabic-llm.yaml", estimate=True)
            print(est.requests, est.usd, est.dearest)
    """

    study: str
    questions: int
    held_out: int
    trials: int
    """Trials left to run."""
    finished: int
    """Trials the study already holds: never run again."""
    configurations: int
    stages: tuple[StageCost, ...]
    cheapest: ConfigCost | None
    dearest: ConfigCost | None
    preflight: int
    requests: float
    cached: float
    usd: float | None
    unpriced: tuple[str, ...] = ()
    seconds_per_trial: float | None = None
    seconds: float | None = None
    untimed: tuple[str, ...] = ()

    @property
    def usd_per_trial(self) -> float | None:
        """Dollars a trial adds on average (None: a model without a price)."""
        costs = [s.usd_per_trial for s in self.stages]
        return None if any(c is None for c in costs) else sum((c for c in costs if c is not None), 0.0)

    def headline(self) -> dict[str, float]:
        """The numbers a study's summary sets beside its actual spending."""
        out = {"llm_requests": round(self.requests, 1)}
        if self.usd is not None:
            out["llm_cost_usd"] = round(self.usd, 8)
        return out

    def to_dict(self) -> dict[str, Any]:
        """The estimate as JSON-ready values (what ``--estimate --json`` prints)."""
        out = asdict(self)
        out["usd_per_trial"] = self.usd_per_trial
        return out


@dataclass(frozen=True)
class _Priced:
    stage: str
    model: str
    input_tokens: int
    output_tokens: int
    usd: float | None
    cache: str
    """Its LLM cache key."""
    key: str
    """Its identity in the study: the cache key, and the answer it judges (see ``Call.answer``)."""


@dataclass(frozen=True)
class Plan:
    """What the study will run: its configurations (trial parameters, pipeline config) and questions,
    its trials left and done, its held-out questions and its test requests."""

    study: str
    configs: Sequence[tuple[dict[str, Any], PipelineConfig]]
    questions: Sequence[Question]
    held_out: int
    trials: int
    finished: int
    preflight: int
    held_out_done: bool
    """The held-out re-score is stored on the study for its winner: a rerun asks nothing."""


def estimate(
    plan: Plan,
    passages: Callable[[Question, PipelineConfig], list[str]],
    *,
    llm: LLMConfig | None,
    judge: Judge | None,
    answers: bool,
    cache_file: Path,
    caches: str | None,
    pace: Mapping[str, float] | None = None,
) -> Estimate:
    """Price ``plan``: every configuration's requests for the first ``SAMPLE_QUESTIONS`` questions
    (``passages``: what retrieval would hand each), scaled to the study's trials and questions. A prompt
    two configurations share is paid once, as the LLM cache has it (``cache_file``, or the shared table of
    ``caches``, a PostgreSQL URL, where the study keeps its replies there); a reply cached already is not
    paid again. ``pace``: seconds a request of each
    model takes with its concurrency (its latency over ``max_concurrency``), to time the same requests
    (None: not timed)."""
    sample = list(plan.questions[:SAMPLE_QUESTIONS])
    per_config = [
        list({p.key: p for p in (_price(c) for q in sample
                                 for c in question_calls(q, passages(q, config), config, llm, judge,
                                                         answers=answers))}.values())
        for _, config in plan.configs
    ]
    unique = list({p.key: p for calls in per_config for p in calls}.values())
    cached = _cached_keys(cache_file, caches, {p.cache for p in unique})
    new = [p for p in unique if p.cache not in cached]
    scale = len(plan.questions) / max(len(sample), 1)  # sample -> every question
    share = plan.trials / max(len(per_config), 1)  # trials to run per configuration priced
    mean = fmean(len(c) for c in per_config) if per_config else 0.0
    held = 0.0 if plan.held_out_done else plan.held_out / max(len(sample), 1)  # sample -> held-out set
    requests = share * len(new) * scale + held * HELD_OUT_CONTENDERS * mean + plan.preflight
    usd = None
    new_usd, mean_usd = _sum_usd(new), _mean([_sum_usd(c) for c in per_config])
    if new_usd is not None and mean_usd is not None:
        usd = share * new_usd * scale + held * HELD_OUT_CONTENDERS * mean_usd
    timed = pace or {}
    seconds = None
    new_s, mean_s = _sum_seconds(new, timed), _mean([_sum_seconds(c, timed) for c in per_config])
    if pace is not None and new_s is not None and mean_s is not None:
        seconds = share * new_s * scale + held * HELD_OUT_CONTENDERS * mean_s
    ranked = sorted(
        (ConfigCost(params, len(c) * scale, _sum_usd(c, scale))
         for (params, _), c in zip(plan.configs, per_config, strict=True)),
        key=lambda c: (c.usd_per_trial or 0.0, c.requests_per_trial),
    )
    return Estimate(
        plan.study, len(plan.questions), plan.held_out, plan.trials, plan.finished, len(plan.configs),
        _stages(unique, len(per_config), len(sample), len(plan.questions)), ranked[0] if ranked else None,
        ranked[-1] if ranked else None, plan.preflight, round(requests, 1),
        round(share * (len(unique) - len(new)) * scale, 1), usd,
        tuple(sorted({p.model for p in unique if p.usd is None})),
        None if pace is None or mean_s is None else mean_s * scale, seconds,
        () if pace is None else tuple(sorted({p.model for p in unique if p.model not in pace})),
    )


def _mean(totals: Sequence[float | None]) -> float | None:
    """The mean of the configurations' totals; None when one has none (a model without a price, or
    untimed)."""
    if any(t is None for t in totals):
        return None
    return fmean(t or 0.0 for t in totals) if totals else 0.0


def _price(call: Call) -> _Priced:
    llm = call.llm
    prompt = count_tokens(llm.model, call.messages)
    completion = count_text_tokens(llm.model, call.reply)
    if llm.max_tokens is not None:
        completion = min(completion, llm.max_tokens)
    usd = request_cost(llm, prompt, completion)
    cache = cache_key(llm.model, llm.api_base, call.messages, llm.call_params())
    return _Priced(call.stage, llm.model, prompt, completion, usd, cache, cache + call.answer)


def _cached_keys(cache_file: Path, caches: str | None, keys: set[str]) -> set[str]:
    """The keys the work dir's LLM cache holds: the shared table of ``caches`` (a PostgreSQL URL, what
    the study's clients use), else ``cache_file`` (none without it: the estimate creates none)."""
    if not keys or (caches is None and not cache_file.exists()):
        return set()
    cache = LLMCache(cache_file, caches=caches)
    try:
        return {k for k in keys if cache.get(k) is not None}
    finally:
        cache.close()


def _sum_usd(calls: Sequence[_Priced], scale: float = 1.0) -> float | None:
    """The calls' dollars (times ``scale``); None when one of them has no price."""
    return _sum([p.usd for p in calls], scale)


def _sum_seconds(calls: Sequence[_Priced], pace: Mapping[str, float]) -> float | None:
    """The calls' wall seconds at their models' pace; None when one of them is untimed."""
    return _sum([pace.get(p.model) for p in calls], 1.0)


def _sum(values: Sequence[float | None], scale: float) -> float | None:
    return None if any(v is None for v in values) else scale * sum(v for v in values if v is not None)


def _stages(unique: Sequence[_Priced], configs: int, n: int, q: int) -> tuple[StageCost, ...]:
    """Each stage's calls, tokens and dollars a trial adds, on average over the configurations: a request
    another configuration shares is counted once."""
    groups: dict[tuple[str, str], list[_Priced]] = {}
    for p in unique:
        groups.setdefault((p.stage, p.model), []).append(p)
    share = 1 / max(configs, 1) / max(n, 1)  # of one configuration's one question
    return tuple(
        StageCost(stage, model, len(calls) * share, q, fmean(p.input_tokens for p in calls),
                  fmean(p.output_tokens for p in calls), _sum_usd(calls, q * share))
        for (stage, model), calls in groups.items()
    )


def config_label(params: Mapping[str, Any]) -> str:
    """A configuration's parameters in one line: "generation.template=concise, retrieval.k=5"."""
    return ", ".join(f"{k}={v}" for k, v in params.items()) or "(the defaults)"
