"""The prompt optimizer: GEPA, through the ``gepa`` package, over a study's own scoring.

Why the ``gepa`` package and not MLflow's ``optimize_prompts``: MLflow's optimizer scores candidates
with its own scorers and calls the models itself, while a candidate here must be scored exactly as the
study scores a trial (its objective, its judges, its retrieval), through Composer's LLM client (its
cache, so a rerun sends nothing; its purposes, so every request is counted; its budget, so the
``stop:`` block holds) and on minibatches of the study's selection split. ``gepa`` lets an adapter own
all of that (``composer.prompt_tuning.adapter``) and keeps only the search: reflection on failures,
acceptance on minibatches, the Pareto set of candidates.

The winner GEPA finds on the selection questions is trusted only after the held-out split: the same
paired bootstrap as the study's held-out verdict, against its seed. Only a "better" verdict registers
it (a new version in the Prompt Registry, the alias moved to it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import gepa
from gepa.core.result import GEPAResult

from composer.data.types import QuestionSet
from composer.errors import BudgetSpent, ConfigError
from composer.llm.client import LLMClient
from composer.llm.config import LLMConfig, derive_config
from composer.llm.faults import scrub
from composer.llm.spend import Spend, purpose
from composer.prompt_tuning.adapter import ComposerAdapter
from composer.prompt_tuning.components import to_components
from composer.prompt_tuning.config import PromptTuningConfig
from composer.prompt_tuning.result import Candidate, Outcome, PromptOptimization, Verdict
from composer.prompt_tuning.scorer import PromptScorer
from composer.prompt_tuning.stored import ResultStore, optimization_key
from composer.prompts import UserPrompt
from composer.prompts.registry import answer_prompt_name, register_prompt, registered_version, set_alias
from composer.prompts.spec import is_registry_uri
from composer.redact import scrub_url
from composer.tracking.prompt_runs import PromptRunTarget, log_prompt_optimization

log = logging.getLogger(__name__)

BudgetCheck = Callable[[], str | None]
"""Why the budget is spent (the study's ``stop:`` block), or None: asked between candidates (a scorer
also asks it after each batch, raising ``BudgetSpent``, which stops the search as this does)."""


def optimize(
    seed: UserPrompt,
    scorer: PromptScorer,
    selection: QuestionSet,
    held_out: QuestionSet,
    config: PromptTuningConfig,
    *,
    study: str,
    llm: LLMConfig | None,
    tracking: PromptRunTarget,
    cache_dir: str | Path | None = None,
    budget: BudgetCheck | None = None,
    results: ResultStore | None = None,
    context: tuple[str, ...] = (),
    spend: Spend | None = None,
) -> PromptOptimization:
    """Optimize ``seed`` for ``study``: GEPA over ``selection``, the best candidate judged on ``held_out``
    against the seed, registered and promoted only when better.

    ``llm`` is the study's ``llm:`` block (the reflection model's default and its operational settings);
    ``cache_dir`` the LLM cache the reflection client shares; ``budget`` stops the search between
    candidates; ``results`` keeps the finished optimization under its key (``optimization_key`` with
    ``context``: what else the scores depend on), so a rerun returns it and sends nothing; the requests
    sent are also added to ``spend`` when given.
    """
    key = optimization_key(seed, config, selection, held_out, study, *context)
    if results is not None and (stored := results.get(key)) is not None:
        return replace(PromptOptimization.from_dict(stored), requests={})
    started = time.monotonic()
    counted = Spend()
    with counted.counting():
        adapter = ComposerAdapter(seed, scorer, selection,
                                  LLMClient(reflection_config(config, llm), cache_dir=cache_dir),
                                  max_proposals=config.max_proposals)
        candidates, best, pareto, spent = _search(adapter, selection, config, budget)
        if best.index != 0 and spent is None and budget is not None:
            spent = budget()  # the last candidate's scoring may have spent it
        if spent is not None:
            verdict, reason = None, (f"the seed stays: {spent}: the search stopped before "
                                     + ("the held-out re-score" if best.index else "a proposal beat it"))
        else:
            try:
                verdict, reason = _judge(scorer, seed, best, held_out)
            except BudgetSpent as exc:  # the scorer's check after a batch: no verdict on half the split
                spent = str(exc)
                verdict, reason = None, f"the seed stays: {spent}: the held-out re-score was cut short"
    registered = None
    if verdict is not None and verdict.outcome == "better":
        registered = _register(seed, best.prompt, config, study, verdict, tracking.tracking_uri)
        reason = (f"{registered} registered as @{config.alias}: held-out difference "
                  f"{verdict.difference:+.3f} [{verdict.ci[0]:+.3f}, {verdict.ci[1]:+.3f}]")
    usage = counted.ordered()
    if spend is not None:
        for name, numbers in usage.items():
            spend.add(name, numbers)
    result = PromptOptimization(
        study=study, seed=candidates[0], best=best, candidates=candidates, pareto=pareto, verdict=verdict,
        registered=registered, promoted=registered is not None, reason=reason,
        requests={name: int(numbers.get("llm_requests", 0)) for name, numbers in usage.items()},
        seconds=round(time.monotonic() - started, 3), discarded=adapter.discarded, key=key,
    )
    keep = results if spent is None else None  # cut short by the budget: a rerun with more goes on
    if keep is not None:  # before MLflow: what was registered is never left without the result saying so
        keep.put(key, result.to_dict())
    try:
        result = replace(result, run_id=log_prompt_optimization(result.to_dict(), tracking))
    except Exception as exc:  # MLflow's and its store's errors alike: the result is kept, the runs are not
        why = scrub_url(scrub(str(exc).splitlines()[0])) if str(exc) else type(exc).__name__
        log.warning("the optimization's MLflow runs were not logged (%s); its result is stored", why)
        return result
    if keep is not None:
        keep.put(key, result.to_dict())  # now with its run
    return result


def reflection_config(config: PromptTuningConfig, llm: LLMConfig | None) -> LLMConfig:
    """The reflection model's settings: its own model, endpoint and key variable where given, else the
    ``llm:`` block's (whose operational settings it keeps: timeout, retries, cache)."""
    model = config.reflection_model or (llm.model if llm is not None else None)
    if model is None:
        raise ConfigError("no model to propose prompts: set prompt_tuning.reflection_model or an llm: block",
                          field="prompt_tuning.reflection_model")
    update: dict[str, Any] = {}
    if config.reflection_api_base is not None:
        update["api_base"] = config.reflection_api_base
    if config.reflection_api_key_env is not None:
        update["api_key_env"] = config.reflection_api_key_env
    return derive_config(llm or LLMConfig(model=model), model, **update)


class _Stop:
    """GEPA's stop condition between candidates: the proposals allowed are made, or the budget is spent."""

    def __init__(self, adapter: ComposerAdapter, budget: BudgetCheck | None) -> None:
        self.adapter = adapter
        self.budget = budget
        self.why: str | None = None

    def __call__(self, gepa_state: Any) -> bool:
        if self.adapter.proposals >= self.adapter.max_proposals:
            return True
        if self.budget is not None and (why := self.budget()) is not None:
            self.why = why
            return True
        return False


class _QuietLog:
    """GEPA's progress lines, to Composer's debug log instead of stdout."""

    def log(self, message: str) -> None:
        log.debug("gepa: %s", message)


def _search(
    adapter: ComposerAdapter, selection: QuestionSet, config: PromptTuningConfig, budget: BudgetCheck | None
) -> tuple[tuple[Candidate, ...], Candidate, tuple[int, ...], str | None]:
    """GEPA's search: (every candidate booked, GEPA's best on the selection, its Pareto set, why the
    budget stopped it or None)."""
    ids = [q.id for q in selection]
    stop = _Stop(adapter, budget)
    try:
        found: GEPAResult[str, str] = gepa.optimize(
            seed_candidate=to_components(adapter.seed), trainset=ids, valset=ids, adapter=adapter,
            candidate_selection_strategy="pareto", reflection_minibatch_size=min(config.minibatch, len(ids)),
            module_selector="round_robin", max_metric_calls=config.max_metric_calls, stop_callbacks=stop,
            logger=_QuietLog(), seed=config.random_seed, raise_on_exception=True,
        )
    except BudgetSpent as exc:  # spent inside a candidate's scoring (the scorer checks after each batch)
        log.warning("prompt optimization stopped: %s", exc)
        candidates = tuple(adapter.candidate(i, kept=i == 0) for i in range(len(adapter.prompts)))
        return candidates, candidates[0], (0,), str(exc)
    if stop.why is not None:
        log.warning("prompt optimization stopped: %s", stop.why)
    pool = {adapter.book(c, None) for c in found.candidates}
    candidates = tuple(adapter.candidate(i, kept=i in pool) for i in range(len(adapter.prompts)))
    best = candidates[adapter.book(found.candidates[found.best_idx], None)]
    front = {adapter.book(found.candidates[i], None)
             for programs in found.per_val_instance_best_candidates.values() for i in programs}
    return candidates, best, tuple(sorted(front)), stop.why


def _judge(scorer: PromptScorer, seed: UserPrompt, best: Candidate, held_out: QuestionSet
           ) -> tuple[Verdict | None, str]:
    """The held-out verdict of ``best`` against the seed (None when the seed is still the best), and the
    one line that says what stays."""
    if best.index == 0:
        return None, "the seed stays: no proposal scored better on the selection questions"
    with purpose("prompt_eval"):
        seed_scored = scorer(seed, held_out)
        best_scored = scorer(best.prompt, held_out)
    table = best_scored.report.table
    diff, (low, high) = scorer.objective.difference(table.metrics, seed_scored.report.table.metrics,
                                                    table.conversations)
    outcome: Outcome = "better" if low > 0 else "worse" if high < 0 else "no difference"
    verdict = Verdict(outcome, seed_scored.composite, best_scored.composite, diff, (low, high), len(held_out))
    return verdict, (f"the seed stays: held-out difference {diff:+.3f} [{low:+.3f}, {high:+.3f}], "
                     f"{'worse' if outcome == 'worse' else 'no better'}")


def _register(seed: UserPrompt, winner: UserPrompt, config: PromptTuningConfig, study: str, verdict: Verdict,
              tracking_uri: str) -> str:
    """Register the winner as a new version (the seed first, when no version of that name holds it yet,
    so the lineage shows) and move the alias to it; returns its pinned URI. A text a version already
    holds (``registered_version``) is not registered again: a rerun, or a second optimization from the
    same seed, adds no copy."""
    seed_name = seed.source.removeprefix("prompts:/").split("/")[0] if seed.source and \
        is_registry_uri(seed.source) else None
    name = config.registry_name or seed_name or answer_prompt_name(study)
    if seed_name != name and registered_version(name, seed, tracking_uri) is None:
        register_prompt(name, seed, tags={"composer.study": study, "composer.role": "seed"},
                        commit_message=f"seed of the prompt optimization of {study}",
                        tracking_uri=tracking_uri)
    tags = {"composer.study": study, "composer.verdict": verdict.outcome,
            "composer.held_out_seed": f"{verdict.seed_score:.4f}",
            "composer.held_out_best": f"{verdict.best_score:.4f}",
            "composer.held_out_difference": f"{verdict.difference:.4f}",
            "composer.held_out_ci": f"[{verdict.ci[0]:.4f}, {verdict.ci[1]:.4f}]"}
    uri = registered_version(name, winner, tracking_uri) or register_prompt(
        name, winner, tags=tags, tracking_uri=tracking_uri,
        commit_message=f"optimized for {study}: held-out {verdict.difference:+.3f}")
    set_alias(name, config.alias, int(uri.rsplit("/", 1)[1]), tracking_uri)
    return uri
