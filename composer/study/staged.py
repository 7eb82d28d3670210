"""The staged strategy (``strategy: staged``): LLM calls only where retrieval is already good.

Stage 1 is a study of its own, ``<name>.retrieval`` in the same storage, over the retrieval dimensions
alone, scored on the objective's retrieval metrics (renormalized) with no LLM at all: no answer, no judge,
no query expansion, no LLM reranking. Stage 2 is the study ``<name>`` itself, over the whole space and
the whole objective, where every trial runs on one of stage 1's ``top_n`` best distinct retrieval
configurations: all of them crossed with the generation dimensions as a grid when that grid fits the trials
left (or the sampler is ``grid``), else the sampler draws the generation dimensions and each trial takes the
retrieval configuration the fewest trials have run on. Export, leaderboard and the held-out re-score read
``<name>`` as for a joint study.

A dimension belongs to stage 2 when it is a ``generation`` or ``query_expansion`` setting, when one of its
values calls the LLM (``rerank.method: llm``, ``conversation.rewrite: llm``), or when its ``when`` names such
a setting; every other one is a retrieval dimension. The stage-1 configurations stage 2 runs on are
recorded on ``<name>`` when it begins (``STAGED_ATTR``): a rerun continues stage 1, or stage 2, and never
runs stage 1 again once stage 2 began (a larger ``n_trials`` then goes to stage 2).

With ``stages.prompt: true`` a prompt stage follows stage 2: the winner's answer prompt optimized with GEPA
and judged on the held-out split (``composer.study.prompt_stage``); a ``prompt_tuning:`` block alone only
sets how ``composer tune-prompt`` optimizes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from composer.errors import ComposerError, ConfigError, option
from composer.metrics.retrieval import RETRIEVAL_METRICS
from composer.objective import ObjectiveConfig
from composer.study.data import StudyData
from composer.study.experiment import ExperimentConfig
from composer.study.space import Dimension, SearchSpace

if TYPE_CHECKING:
    import optuna
    from optuna.samplers import BaseSampler

STAGED_ATTR = "composer.staged"
"""Study user attribute of ``<name>``, set when stage 2 starts: ``{"retrieval_study", "retrieval_trials",
"top": [stage-1 parameters, best first], "composites": [their stage-1 scores]}``."""
SUFFIX = ".retrieval"
LLM_SECTIONS = ("generation", "query_expansion")
"""Sections whose settings call the LLM whatever their value."""


@dataclass(frozen=True)
class Plan:
    """How a staged study splits its trials, and which dimensions each stage searches."""

    retrieval_trials: int
    generation_trials: int
    top_n: int
    retrieval_keys: tuple[str, ...]


def plan_of(exp: ExperimentConfig, space: SearchSpace, n_trials: int | None) -> Plan | None:
    """The staged plan (None for ``strategy: joint``), checked before anything runs: a bad one is a
    ConfigError (exit 2) naming the setting to change."""
    if exp.strategy != "staged":
        return None
    target = n_trials if n_trials is not None else exp.n_trials
    if target is None:
        raise ConfigError("strategy: staged splits n_trials between its stages: give n_trials",
                          field="n_trials")
    if space.free:
        raise ConfigError("strategy: staged needs a pipeline search space (a system: factory's settings "
                          "cannot be told retrieval from generation)", field="strategy")
    first, second = split_dimensions(space)
    if not first or not second:
        missing = "retrieval" if not first else "generation (generation.*, query_expansion.*)"
        raise ConfigError(f"strategy: staged needs {missing} dimensions in {space.source} and it has "
                          "none: use strategy: joint", field="strategy")
    retrieval_objective(exp.objective)
    if exp.stages.prompt and exp.split is None:
        raise ConfigError("stages.prompt judges the optimized prompt on held-out questions, and this "
                          "experiment keeps none: add split: {held_out: 0.3}", field="stages.prompt")
    if exp.stages.prompt:
        _check_prompt_stage(exp, space)
    first_trials = exp.stages.retrieval_trials or max(target // 2, 1)
    if first_trials >= target:
        raise ConfigError(f"stages.retrieval_trials ({first_trials}) leaves none of n_trials ({target}) to "
                          "stage 2: give more n_trials or fewer retrieval_trials",
                          field="stages.retrieval_trials")
    return Plan(first_trials, target - first_trials, exp.stages.top_n, tuple(d.key for d in first))


def _check_prompt_stage(exp: ExperimentConfig, space: SearchSpace) -> None:
    """What the prompt stage needs, checked before stage 1: found missing after stage 2 it could only
    skip the stage, the trials spent."""
    from composer.prompt_tuning.engine import reflection_config
    from composer.study.prompt_stage import tuning_settings

    reflection_config(tuning_settings(exp), exp.llm)
    if exp.llm is None and all(model is None for model in space.possible("generation.model")):
        raise ConfigError("stages.prompt optimizes the winner's answer prompt, and no configuration of "
                          f"{space.source} answers with an LLM: give the experiment an llm: block",
                          field="llm")


def split_dimensions(space: SearchSpace) -> tuple[list[Dimension], list[Dimension]]:
    """The space's retrieval dimensions and its generation ones (see the module docstring)."""
    first: list[Dimension] = []
    second: list[Dimension] = []
    for dim in space.dimensions:
        llm_keys = [*LLM_SECTIONS, *(d.key for d in second)]
        conditioned = any(cond == k or cond.startswith(f"{k}.") for cond in dim.when for k in llm_keys)
        (second if conditioned or _calls_llm(dim) else first).append(dim)
    return first, second


def _calls_llm(dim: Dimension) -> bool:
    """A setting of an LLM section, or a rerank choice (a method, or a bundle's) that is the LLM reranker."""
    if dim.key.split(".")[0] in LLM_SECTIONS:
        return True
    for section, field in (("rerank", "method"), ("conversation", "rewrite")):
        if dim.key == section:
            return any(bundle.get(field) == "llm" for bundle in dim.bundles.values())
        if dim.key == f"{section}.{field}" and "llm" in dim.choices:
            return True
    return False


def retrieval_objective(config: ObjectiveConfig) -> ObjectiveConfig:
    """Stage 1's objective: the objective's retrieval metrics alone, at its cutoff (weights renormalized
    when resolved), single-objective."""
    metrics = {m: w for m, w in config.metrics.items() if m.partition("@")[0] in RETRIEVAL_METRICS and w > 0}
    if not metrics:
        raise ConfigError(f"strategy: staged ranks retrieval configurations on the objective's retrieval "
                          f"metrics, and it weighs none ({', '.join(config.metrics)}): add one (e.g. recall)",
                          field="objective.metrics")
    return ObjectiveConfig(metrics=metrics, k=config.k)


def retrieval_space(space: SearchSpace, keys: Sequence[str]) -> SearchSpace:
    """The retrieval dimensions over defaults that call no LLM: no generator, no query expansion, no LLM
    reranking and no LLM rewrite of follow-ups (``concat`` instead) by default."""
    defaults = dict(space.defaults)
    defaults["generation"] = {**defaults.get("generation", {}), "model": None}
    defaults["query_expansion"] = {**defaults.get("query_expansion", {}), "method": "none"}
    if defaults.get("rerank", {}).get("method") == "llm":
        defaults["rerank"] = {"method": "none"}
    if defaults.get("conversation", {}).get("rewrite") == "llm":
        defaults["conversation"] = {**defaults["conversation"], "rewrite": "concat"}
    dims = tuple(d for d in space.dimensions if d.key in keys)
    return SearchSpace(dims, defaults, f"{space.source} (stage 1: retrieval)")


def first_stage(
    exp: ExperimentConfig, data: StudyData, plan: Plan, name: str
) -> tuple[ExperimentConfig, StudyData]:
    """Stage 1 of study ``name``: its experiment (study ``<name>.retrieval``, in the same MLflow experiment)
    and its trials' data: the same questions and indexes, no LLM and no judge."""
    first = exp.model_copy(update={
        "name": f"{name}{SUFFIX}",
        "objective": retrieval_objective(exp.objective),
        "n_trials": plan.retrieval_trials,
        "strategy": "joint",
        "llm": None,
        "judge": None,
        "mlflow": exp.mlflow.model_copy(update={"experiment": exp.mlflow_experiment}),
    })
    first_data = StudyData(
        corpus=data.corpus,
        questions=data.questions,
        space=retrieval_space(data.space, plan.retrieval_keys),
        objective_config=first.objective,
        workdir=data.workdir,
        qdrant=data.qdrant,
        batch_size=data.batch_size,
    )
    return first, first_data


def started(study: optuna.Study) -> bool:
    """Whether the study's stage 2 began (stage 1 is then closed)."""
    return STAGED_ATTR in study.user_attrs


def check_strategy(study: optuna.Study, strategy: str) -> None:
    """A study keeps its strategy: a joint study's trials were sampled over every retrieval configuration,
    a staged one's over stage 1's best only."""
    was = "staged" if started(study) else "joint" if study.get_trials(deepcopy=False) else None
    if was is not None and was != strategy:
        raise ConfigError(f"study '{study.study_name}' was run with strategy: {was}; keep it, or start a new "
                          f"study ({option('study_name', 'NEW')})", field="strategy")


def resumed(plan: Plan, study: optuna.Study) -> Plan:
    """The plan as the study's stage 2 began: the stage-1 trials it recorded, the rest of n_trials."""
    recorded = study.user_attrs.get(STAGED_ATTR)
    if recorded is None:
        return plan
    first = int(recorded["retrieval_trials"])
    total = plan.retrieval_trials + plan.generation_trials
    return replace(plan, retrieval_trials=first, generation_trials=max(total - first, 0))


def record_first_stage(study: optuna.Study, first: optuna.Study, plan: Plan) -> None:
    """Record on ``study`` stage 1's ``top_n`` best distinct configurations (its ``first`` study's), once:
    stage 2 keeps to them from then on, whatever stage 1 would rank later."""
    from composer.record import TrialRecord
    from composer.study.leaderboard import ranked_trials

    if started(study):
        return
    best = ranked_trials(first)[: plan.top_n]
    if not best:
        raise ComposerError(f"stage 1 ({first.study_name}) completed no trial, so stage 2 has no "
                            f"retrieval configuration to run on: see `composer trials {first.study_name}`, "
                            "fix the cause and run again")
    composites = [record.composite if (record := TrialRecord.of(t)) is not None else None for t in best]
    study.set_user_attr(STAGED_ATTR, {"retrieval_study": first.study_name,
                                      "retrieval_trials": plan.retrieval_trials,
                                      "top": [dict(t.params) for t in best], "composites": composites})


def second_stage(study: optuna.Study, exp: ExperimentConfig, space: SearchSpace, plan: Plan) -> None:
    """Give the study the sampler that keeps to stage 1's recorded best."""
    pins = [dict(p) for p in study.user_attrs[STAGED_ATTR]["top"]]
    study.sampler = _pinned_sampler(study.sampler, exp, space, pins, plan.generation_trials)


def _pinned_sampler(
    base: BaseSampler, exp: ExperimentConfig, space: SearchSpace, pins: list[dict[str, Any]], trials: int
) -> BaseSampler:
    """The grid of every pinned configuration crossed with the generation dimensions when it fits the
    ``trials`` left (always with the grid sampler), else ``base`` with the retrieval parameters pinned."""
    from composer.study._sampling import ConditionalGridSampler, PinnedSampler, StudySampler

    try:
        points = [point for pin in pins for point in pinned_space(space, pin).grid()]
    except ConfigError:
        if exp.sampler.name == "grid":
            raise
        points = None
    if points is not None and (exp.sampler.name == "grid" or len(points) <= trials):
        grid = ConditionalGridSampler(points, seed=exp.sampler.seed)
        return StudySampler(lambda _: grid, per_trial=False)
    return PinnedSampler(base, pins)


def pinned_space(space: SearchSpace, pin: dict[str, Any]) -> SearchSpace:
    """``space`` with each dimension ``pin`` sets down to that one value."""
    dims = tuple(
        Dimension(d.key, "categorical", (pin[d.key],), d.bundles, when=d.when) if d.key in pin else d
        for d in space.dimensions
    )
    return SearchSpace(dims, space.defaults, space.source, space.free)
