"""What a study does when its trials are done: re-score the winner and the runner-up on the held-out split
(and on the selection set), check the judge, count what it spent, and make its summary (``StudySummary``)."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from composer.llm.spend import Spend
from composer.record import TrialRecord
from composer.redact import scrub_url
from composer.study.leaderboard import ranked_trials
from composer.summary import (
    Contender,
    Difference,
    HeldOut,
    IndexCounts,
    JudgeAgreement,
    ObjectiveSummary,
    Separation,
    StudySummary,
)

if TYPE_CHECKING:
    import optuna
    from rich.console import Console

    from composer.data.types import QuestionSet
    from composer.objective import Objective
    from composer.study.data import StudyData
    from composer.study.experiment import ExperimentConfig

ESTIMATE_ATTR = "llm_estimate"
"""The study's user attribute holding its LLM estimate made before its first trial (``Estimate.headline``)."""
SPEND_ATTR = "llm_spend."
"""Prefix of the study's user attributes holding one run's LLM requests besides its trials', by purpose."""
SELECTION_ATTR = "selection"
"""The study's user attribute holding its selection set's separation (``Separation.to_dict``)."""
JUDGE_ATTR = "judge_agreement"
"""The study's user attribute holding its judge's agreement (``JudgeAgreement.to_dict``)."""


def held_out(
    study: optuna.Study, questions: QuestionSet, data: StudyData, console: Console
) -> HeldOut | None:
    """Re-score the winner and the runner-up on the held-out questions; CI of their paired difference.

    The trials are done by then: a re-score that fails (over the LLM failure budget, say) is reported as
    ``error`` (with the winner's result if only the runner-up failed) instead of failing the study.
    """

    ranked = ranked_trials(study)
    if not ranked:
        return None
    contenders = ranked[:2]
    names = ", ".join(f"#{t.number}" for t in contenders)
    console.print(f"re-scoring {names} on {len(questions)} held-out questions", highlight=False)
    error = None
    scores = []
    records = []
    for t in contenders:
        record = TrialRecord.of(t)
        assert record is not None
        try:
            pipeline = data.rebuild(t.params, record.config_hash)
            scored = data.score(pipeline, questions, batch_size=len(questions))
        except Exception as exc:
            error = f"re-scoring trial #{t.number} failed: {type(exc).__name__}: {exc}"[:4000]
            console.print(f"held-out {error}", style="red", markup=False, highlight=False)
            break
        scores.append(scored)
        records.append(record)
    objective = data.objective
    rescored = [
        Contender(t.number, record.composite, objective.composite(scored.report.means()))
        for t, record, scored in zip(contenders, records, scores, strict=False)
    ]
    difference = None
    if len(scores) == 2:
        # The difference of the two held-out composites above, and a CI of that same statistic.
        # Over conversations, when the held-out questions have them: a conversation's turns rise and fall
        # together, so resampling turns would narrow the CI.
        table = scores[0].report.table
        diff, (low, high) = objective.difference(table.metrics, scores[1].report.table.metrics,
                                                 table.conversations)
        difference = Difference(diff, (low, high), len(scores[0].report), low > 0, high < 0)
    return HeldOut(
        len(questions),
        winner=rescored[0] if rescored else None,
        runner_up=rescored[1] if len(rescored) == 2 else None,
        difference=difference,
        error=error,
    )


def held_out_once(
    study: optuna.Study, questions: QuestionSet, data: StudyData, console: Console
) -> HeldOut | None:
    """``stored_held_out``, else ``held_out``'s re-score: a rerun of a finished study sends no request
    and repeats its verdict."""
    return stored_held_out(study, len(questions)) or held_out(study, questions, data, console)


def stored_held_out(study: optuna.Study, n_questions: int) -> HeldOut | None:
    """The held-out re-score stored on the study, when it re-scored today's winner and runner-up on as
    many questions; a stored re-score that failed is none (it is tried again)."""
    stored = HeldOut.from_dict(study.user_attrs.get("held_out"))
    if stored is None or stored.error is not None or stored.n_questions != n_questions:
        return None
    scored = [c.trial for c in (stored.winner, stored.runner_up) if c is not None]
    return stored if scored == [t.number for t in ranked_trials(study)[:2]] else None


def selection_once(study: optuna.Study, data: StudyData) -> Separation | None:
    """``selection_separation``, stored on the study and read back while its winner and runner-up and the
    selection set are the same."""
    stored = Separation.from_dict(study.user_attrs.get(SELECTION_ATTR))
    top = [t.number for t in ranked_trials(study)[:2]]
    if stored is not None and [stored.winner, stored.runner_up] == top and stored.n_questions == len(
        data.questions
    ):
        return stored
    separation = selection_separation(study, data)
    if separation is not None:
        study.set_user_attr(SELECTION_ATTR, separation.to_dict())
    return separation


def selection_separation(study: optuna.Study, data: StudyData) -> Separation | None:
    """Whether the selection questions separate the winner from the runner-up: the CI of the paired
    difference of their composites, re-scored on the selection set (from the caches) as ``held_out`` does
    on the held-out one. A CI that spans 0 means the set is too small to tell the top trials apart."""
    import io

    from rich.console import Console

    if len(ranked_trials(study)) < 2:
        return None
    rescored = held_out(study, data.questions, data, Console(file=io.StringIO()))
    if rescored is None or rescored.difference is None:
        return None
    d = rescored.difference
    assert rescored.winner is not None and rescored.runner_up is not None  # a difference needs both
    return Separation(len(data.questions), rescored.winner.trial, rescored.runner_up.trial, d.mean, d.ci95,
                      d.winner_really_better or d.runner_up_really_better)


def encode_summary(trials: list[optuna.trial.FrozenTrial]) -> IndexCounts:
    """How much indexing the study paid for: index builds, encode passes, reuses, repeats skipped."""
    records = [r for t in trials if (r := TrialRecord.of(t)) is not None]
    ran = [r for r in records if r.index is not None and r.duplicate_of is None]
    builds = [r for r in ran if r.index is not None and not r.index.reused]
    return IndexCounts(
        trials_indexed=len(ran),
        unique_index_keys=len({r.index.key for r in ran if r.index is not None}),
        index_builds=len(builds),
        encode_passes=sum(1 for r in builds if r.index is not None and r.index.embeddings_computed > 0),
        index_reuses=len(ran) - len(builds),
        embeddings_computed=sum(r.index.embeddings_computed for r in ran if r.index is not None),
        repeats_skipped=sum(1 for r in records if r.duplicate_of is not None),
    )


def llm_totals(trials: list[optuna.trial.FrozenTrial]) -> dict[str, float]:
    """The study's LLM spending (calls, cached calls, tokens, cost, failures): every trial's own, pruned
    and failed ones included, whichever worker ran it; empty when no trial called an LLM."""
    totals: dict[str, float] = {}
    for t in trials:
        record = TrialRecord.of(t)
        for name, value in (record.llm_usage if record is not None else {}).items():
            totals[name] = totals.get(name, 0.0) + float(value)
    return {name: round(total, 8) for name, total in totals.items()}  # no float noise in a cost


def record_spend(study: optuna.Study, spend: Spend) -> None:
    """Store what this run sent besides its trials (preflight, re-scores...) on the study, under a key of
    its own: workers never overwrite each other's, and every later summary counts every run's. ``spend``
    is emptied: recorded again, it adds only what was sent since."""
    if spend.by_purpose:
        study.set_user_attr(f"{SPEND_ATTR}{time.time_ns()}.{os.getpid()}", dict(spend.by_purpose))
        spend.by_purpose.clear()


def study_spend(study: optuna.Study, trials: list[optuna.trial.FrozenTrial]) -> Spend:
    """Every LLM request the study sent, by purpose, in all its runs and workers: the trials' (from their
    records) and the rest (``record_spend``)."""
    spent = Spend()
    for key, stored in study.user_attrs.items():
        if key.startswith(SPEND_ATTR) and isinstance(stored, dict):
            for purpose, usage in stored.items():
                spent.add(purpose, usage)
    spent.add("trial", llm_totals(trials))
    return spent


def summary(
    study: optuna.Study,
    exp: ExperimentConfig,
    provenance: dict[str, Any],
    objective: Objective,
    held: HeldOut | None,
    selection: Separation | None,
    seconds: float,
    agreement: JudgeAgreement | None = None,
) -> StudySummary:
    """The study summary, for the parent run and the CLI."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)  # one read of the storage for the counts and errors
    spent = study_spend(study, trials)
    counts = {
        state: sum(t.state == state for t in trials)
        for state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    }
    ranked = ranked_trials(study)
    best = TrialRecord.of(ranked[0]) if ranked else None
    errors = sorted(
        {
            r.error
            for t in trials
            if t.state == TrialState.FAIL and (r := TrialRecord.of(t)) is not None and r.error
        }
    )
    return StudySummary(
        study=study.study_name,
        storage=scrub_url(exp.storage_url),
        n_trials=len(trials),
        n_complete=counts[TrialState.COMPLETE],
        n_pruned=counts[TrialState.PRUNED],
        n_failed=counts[TrialState.FAIL],
        best_trial=ranked[0].number if ranked else None,
        best_value=None if best is None else best.composite,
        best_metrics=None if best is None else dict(best.metrics),
        best_config=None if best is None else dict(best.config),
        objective=ObjectiveSummary(
            k_eval=exp.objective.k,
            configured=exp.objective.metrics,
            weights=dict(objective.weights),
            notes=list(objective.notes),
            secondary=list(exp.objective.secondary),
        ),
        encode=encode_summary(trials),
        llm_usage=spent.totals() or None,
        llm_by_purpose=spent.ordered() or None,
        llm_estimate=study.user_attrs.get(ESTIMATE_ATTR),
        errors=errors[:10],
        held_out=held,
        data=provenance,
        seconds=seconds,
        pareto_front=sorted(t.number for t in study.best_trials) if exp.multi_objective else None,
        selection=selection,
        judge_agreement=agreement,
    )


def judge_agreement(
    study: optuna.Study, exp: ExperimentConfig, data: StudyData, console: Console
) -> JudgeAgreement | None:
    """The judge's checked agreement with human labels, before the first trial: stored on the study (the
    export and the report read it), and warned about when a judged metric is unchecked or below the
    judge's ``min_kappa``. The metrics are those the objective weighs (what steers the study), else every
    judged one. None for a study without a judge."""
    from composer.judges.config import MIN_KAPPA
    from composer.judges.trust import judge_agreement as agreement_of

    judging = data.judging
    if judging is None:
        return None
    judged = judging.settings.metrics
    steering = [m for m in judged if data.objective.weights.get(m, 0.0) > 0]
    floor = exp.judge.min_kappa if exp.judge is not None else MIN_KAPPA
    agreement = agreement_of(judging.client.config, judging.settings, exp.work_dir,
                             metrics=steering or judged, min_kappa=floor)
    study.set_user_attr(JUDGE_ATTR, agreement.to_dict())
    warning = agreement.warning()
    if warning is not None:
        console.print(f"warning: {warning}", style="yellow", markup=False, highlight=False)
    return agreement
