"""A study's LLM cost before it runs (``composer optimize --estimate``): the configurations its space
holds (every one of a small grid, else a seeded sample), its trials still to run, its held-out re-score
and its test requests, priced by ``composer.cost.estimate``. No request is sent and no study created (the
work dir's caches are opened as a study opens them: its SQLite file, or ``caches:``'s shared table)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from composer.cost.calls import Judge
from composer.cost.estimate import Estimate, Plan, estimate
from composer.cost.passages import StandInPassages
from composer.errors import ComposerError
from composer.llm.config import LLMConfig
from composer.llm.preflight import measure_latency
from composer.pipeline.config import PipelineConfig
from composer.pipeline.workspace import caches_of
from composer.study._optimize import finished_distinct
from composer.study.finish import stored_held_out

if TYPE_CHECKING:
    import optuna

    from composer.study.data import StudyData

MAX_CONFIGS = 64
"""Configurations priced at most: a larger space is priced on a seeded random sample of this many."""


def price_study(
    data: StudyData, study: optuna.Study | None, *, name: str, target: int, held_out: int,
    timed: bool = False,
) -> Estimate:
    """The estimate for ``study`` (None: not created yet) run to ``target`` trials on ``data``, with
    ``held_out`` questions re-scored after it; ``timed``: its wall time too, from test requests to
    each endpoint (the preflight's), the only requests an estimate sends."""
    if data.system is not None:
        raise ComposerError("a cost estimate needs a pipeline search space: a factory's system calls its "
                            "own LLMs, which Composer cannot see")
    finished = finished_distinct(study) if study is not None else 0
    remaining = max(target - finished, 0)
    done = study is not None and remaining == 0 and stored_held_out(study, held_out) is not None
    configs = data.llm_endpoints()
    endpoints = {(c.model, c.api_base, c.api_key_env) for c in configs}
    plan = Plan(name, configurations(data), list(data.questions), held_out, remaining, finished,
                len(endpoints), done)
    judging = data.judging
    judge = Judge(judging.client.config, judging.settings) if judging is not None else None
    return estimate(plan, StandInPassages(data.corpus), llm=data.llm, judge=judge, answers=data.answers,
                    cache_file=data.workdir / "cache" / "llm" / "replies.sqlite",
                    caches=caches_of(data.workdir),
                    pace=_pace(configs) if timed else None)


def _pace(configs: list[LLMConfig]) -> dict[str, float]:
    """Seconds a request of each model takes when its ``max_concurrency`` requests run at once: its test
    request's latency over that many."""
    latency = measure_latency(configs)
    out: dict[str, float] = {}
    for config in configs:
        if config.model in latency:
            out.setdefault(config.model, latency[config.model] / config.max_concurrency)
    return out


def configurations(data: StudyData) -> list[tuple[dict[str, Any], PipelineConfig]]:
    """The space's distinct configurations as (trial parameters, pipeline config): its whole grid when
    it holds at most ``MAX_CONFIGS``, else a seeded random sample of that many."""
    try:
        points = data.space.grid()
    except ComposerError:  # continuous dimensions: no grid
        points = []
    if not points or len(points) > MAX_CONFIGS:
        points = _sampled(data, MAX_CONFIGS)
    out: dict[str, tuple[dict[str, Any], PipelineConfig]] = {}
    for params in points:
        try:
            config, digest = data.configure(params)
        except ComposerError:  # an invalid combination: no trial runs it
            continue
        if isinstance(config, PipelineConfig):
            out.setdefault(digest, (params, config))
    return list(out.values())


def _sampled(data: StudyData, n: int) -> list[dict[str, Any]]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    points = []
    for _ in range(n):
        trial = study.ask()
        points.append(data.space.params(trial))
        study.tell(trial, 0.0)
    return points
