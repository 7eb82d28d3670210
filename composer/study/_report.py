"""What a study reports when it ends: the held-out re-score of its winner, the summary, Optuna's plots."""

from __future__ import annotations

import logging
import warnings
from typing import TYPE_CHECKING, Any

from composer.errors import ComposerError
from composer.redact import scrub_url
from composer.study.leaderboard import ranked_trials
from composer.study.record import TrialRecord

if TYPE_CHECKING:
    import optuna
    from rich.console import Console

    from composer.data.types import QuestionSet
    from composer.study.experiment import ExperimentConfig
    from composer.study.objective import Objective
    from composer.study.runner import StudyData

logger = logging.getLogger(__name__)


def held_out(
    study: optuna.Study, questions: QuestionSet, data: StudyData, console: Console
) -> dict[str, Any] | None:
    """Re-score the winner and the runner-up on the held-out questions; CI of their paired difference.

    The trials are done by then: a re-score that fails (over the LLM failure budget, say) is reported as
    ``"error"`` (with the winner's result if only the runner-up failed) instead of failing the study.
    """
    from composer.metrics.stats import paired_bootstrap_ci
    from composer.study.runner import config_hash

    ranked = ranked_trials(study)
    if not ranked:
        return None
    contenders = ranked[:2]
    names = ", ".join(f"#{t.number}" for t in contenders)
    console.print(f"re-scoring {names} on {len(questions)} held-out questions", highlight=False)
    out: dict[str, Any] = {"n_questions": len(questions)}
    scores = []
    records = []
    for t in contenders:
        record = TrialRecord.of(t)
        assert record is not None
        try:
            # Rebuilt from the trial's parameters: the stored config has its credentials masked.
            config = data.space.build(t.params)
            if config_hash(config) != record.config_hash:
                raise ComposerError("the search space or the llm: block changed since the trial ran")
            pipeline = data.pipeline(config)
            pipeline.index(data.corpus)
            scored = data.score(pipeline, questions, batch_size=len(questions))
        except Exception as exc:
            out["error"] = f"re-scoring trial #{t.number} failed: {type(exc).__name__}: {exc}"[:4000]
            console.print(f"held-out {out['error']}", style="red", markup=False, highlight=False)
            break
        scores.append(scored)
        records.append(record)
    if not scores:
        return out
    objective = data.objective
    for role, t, record, scored in zip(("winner", "runner_up"), contenders, records, scores, strict=False):
        out[role] = {
            "trial": t.number,
            "selection_composite": record.composite,
            "held_out_composite": objective.composite(scored.report.means()),
        }
    if len(scores) == 2:
        pairs = [
            (objective.per_question(a.metrics), objective.per_question(b.metrics))
            for a, b in zip(scores[0].report.samples, scores[1].report.samples, strict=True)
        ]
        kept = [(a, b) for a, b in pairs if a is not None and b is not None]
        if kept:
            a_vals, b_vals = [a for a, _ in kept], [b for _, b in kept]
            low, high = paired_bootstrap_ci(a_vals, b_vals)
            diff = sum(a_vals) / len(a_vals) - sum(b_vals) / len(b_vals)
            out["difference"] = {
                "mean": diff,
                "ci95": [low, high],
                "n_paired": len(kept),
                "winner_really_better": low > 0,
                "runner_up_really_better": high < 0,
            }
    return out


def encode_summary(trials: list[optuna.trial.FrozenTrial]) -> dict[str, int]:
    """How much indexing the study paid for: index builds, encode passes, reuses, repeats skipped."""
    records = [r for t in trials if (r := TrialRecord.of(t)) is not None]
    ran = [r for r in records if r.index is not None and r.duplicate_of is None]
    builds = [r for r in ran if r.index is not None and not r.index.reused]
    return {
        "trials_indexed": len(ran),
        "unique_index_keys": len({r.index.key for r in ran if r.index is not None}),
        "index_builds": len(builds),
        "encode_passes": sum(1 for r in builds if r.index is not None and r.index.embeddings_computed > 0),
        "index_reuses": len(ran) - len(builds),
        "embeddings_computed": sum(r.index.embeddings_computed for r in ran if r.index is not None),
        "repeats_skipped": sum(1 for r in records if r.duplicate_of is not None),
    }


def llm_totals(trials: list[optuna.trial.FrozenTrial]) -> dict[str, float]:
    """The study's LLM spending (calls, cached calls, tokens, cost, failures): every trial's own, pruned
    and failed ones included, whichever worker ran it; empty when no trial called an LLM."""
    totals: dict[str, float] = {}
    for t in trials:
        record = TrialRecord.of(t)
        for name, value in (record.llm_usage if record is not None else {}).items():
            totals[name] = totals.get(name, 0.0) + float(value)
    return {name: round(total, 8) for name, total in totals.items()}  # no float noise in a cost


def summary(
    study: optuna.Study,
    exp: ExperimentConfig,
    provenance: dict[str, Any],
    objective: Objective,
    held: dict[str, Any] | None,
    seconds: float,
) -> tuple[dict[str, Any], dict[str, float]]:
    """The study summary (JSON, for the parent run and the CLI) and its headline metrics."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)  # one read of the storage for the counts and errors
    counts = {
        state.name: sum(t.state == state for t in trials)
        for state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    }
    ranked = ranked_trials(study)
    best = TrialRecord.of(ranked[0]) if ranked else None
    encode = encode_summary(trials)
    llm = llm_totals(trials)
    errors = sorted(
        {
            r.error
            for t in trials
            if t.state == TrialState.FAIL and (r := TrialRecord.of(t)) is not None and r.error
        }
    )
    out: dict[str, Any] = {
        "study": study.study_name,
        "storage": scrub_url(exp.storage_url),
        "n_trials": len(trials),
        "n_complete": counts["COMPLETE"],
        "n_pruned": counts["PRUNED"],
        "n_failed": counts["FAIL"],
        "best_trial": ranked[0].number if ranked else None,
        "best_value": None if best is None else best.composite,
        "best_metrics": None if best is None else dict(best.metrics),
        "best_config": None if best is None else dict(best.config),
        "objective": {
            "k_eval": exp.objective.k,
            "configured": exp.objective.metrics,
            "weights": dict(objective.weights),
            "notes": list(objective.notes),
            "secondary": list(exp.objective.secondary),
        },
        "encode": encode,
        "llm_usage": llm or None,
        "errors": errors[:10],
        "held_out": held,
        "data": provenance,
        "seconds": seconds,
    }
    if exp.multi_objective:
        out["pareto_front"] = sorted(t.number for t in study.best_trials)
    metrics: dict[str, float] = {k: float(v) for k, v in counts.items()}
    metrics.update({k: float(v) for k, v in encode.items()})
    metrics.update(llm)
    if best is not None and best.composite is not None and ranked:
        metrics["best_value"] = best.composite
        metrics["best_trial"] = float(ranked[0].number)
    if held and "difference" in held:
        metrics["held_out_difference"] = float(held["difference"]["mean"])
    metrics["seconds"] = seconds
    return out, metrics


def plots(study: optuna.Study, exp: ExperimentConfig) -> dict[str, str]:
    """Optuna's history, importance and parallel-coordinate plots as self-contained (offline) HTML."""
    from optuna import visualization as vis
    from optuna.trial import FrozenTrial, TrialState

    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return {}  # nothing to draw: Optuna would only print a warning per plot

    def composite(t: FrozenTrial) -> float:
        return float(t.values[0])

    kw: dict[str, Any] = {"target": composite, "target_name": "composite"} if exp.multi_objective else {}
    makers: dict[str, Any] = {
        "optimization_history": lambda: vis.plot_optimization_history(study, **kw),
        "param_importances": lambda: _importances(study, kw),
        "parallel_coordinate": lambda: vis.plot_parallel_coordinate(study, **kw),
    }
    if exp.multi_objective:
        names = ["composite", *exp.objective.secondary]
        makers["pareto_front"] = lambda: vis.plot_pareto_front(study, target_names=names)
    out: dict[str, str] = {}
    for name, make in makers.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # Optuna's notes on tiny studies
                out[name] = make().to_html(include_plotlyjs=True, full_html=True)
        except Exception as exc:  # a plot Optuna cannot draw yet (e.g. importances of 1 trial) is skipped
            logger.warning("plot %s skipped: %s", name, exc)
    return out


def _importances(study: optuna.Study, kw: dict[str, Any]) -> Any:
    """fANOVA reads variance whatever the direction (Optuna's default, PED-ANOVA, assumes a custom target
    is minimized: it would invert the composite's importances); it needs some variance among trials."""
    import optuna
    from optuna import visualization as vis

    fanova = optuna.importance.FanovaImportanceEvaluator(seed=0)
    try:
        return vis.plot_param_importances(study, evaluator=fanova, **kw)
    except RuntimeError:  # zero variance: too few distinct results yet
        return vis.plot_param_importances(study, **kw)
