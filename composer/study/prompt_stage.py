"""Prompt optimization for a study (``composer tune-prompt``, ``composer.optimize_prompt``, the staged
``prompt`` stage): the study side of ``composer.prompt_tuning``.

The engine sees prompts in and scores out (``PromptScorer``); here a prompt is scored as the study scores
a trial: its winner rebuilt from its parameters (the index reused, only the generator's prompt changed),
the questions scored with ``StudyData.score``, each question's composite read with the study's objective.
The seed is the winner's own prompt (its ``generation.prompt``, else its built-in template's text for the
languages of the study's questions) or the prompt the user gives. Candidates are tried on the study's
selection split and the best is re-scored on its held-out split, so an optimization needs one.

A finished optimization is stored on the study (``PROMPT_ATTR`` + its key: a hash of the seed's text, the
settings, the questions, the winner and the objective): a rerun reads it back and sends nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer.errors import BudgetSpent, ComposerError, ConfigError
from composer.llm.prompt import UNTRUSTED, conversation_language
from composer.metrics.scorers import references
from composer.pipeline.config import PipelineConfig
from composer.prompt_tuning.config import PromptTuningConfig
from composer.prompt_tuning.result import PromptOptimization
from composer.prompt_tuning.scorer import FEEDBACK_PASSAGES, PASSAGE_CHARS, ScoredPrompt
from composer.prompt_tuning.stored import optimization_key
from composer.prompts import PromptRef, UserPrompt
from composer.prompts.template import brace_form
from composer.record import TrialRecord
from composer.study import budget, finish
from composer.study.leaderboard import ranked_trials

if TYPE_CHECKING:
    import optuna
    from rich.console import Console

    from composer.cost.prompt_tuning import TuningEstimate
    from composer.data.types import Question, QuestionSet
    from composer.evaluation.report import EvaluationReport
    from composer.evaluation.table import SampleRecord
    from composer.objective import Objective
    from composer.study.data import StudyData
    from composer.study.experiment import ExperimentConfig

PROMPT_ATTR = "composer.prompt_tuning."
"""Prefix of the study user attributes holding a finished optimization (``PromptOptimization.to_dict``),
one per ``Tuning.key``."""
LATEST_ATTR = "composer.prompt_tuning"
"""Study user attribute: the key of the study's latest finished optimization (what its report shows)."""


@dataclass
class StudyPromptScorer:
    """``PromptScorer`` over a study: its winner's pipeline config with the candidate as its answer
    prompt, scored on the study's data and objective, in the study's batches: ``budget`` (why the study's
    ``stop:`` budget is spent, or None) is asked after each, as a trial asks it, so one candidate's
    scoring passes the budget by one batch at most (``BudgetSpent``)."""

    data: StudyData
    config: PipelineConfig
    budget: Callable[[], str | None] | None = None

    @property
    def objective(self) -> Objective:
        return self.data.objective

    def __call__(self, prompt: UserPrompt, questions: QuestionSet) -> ScoredPrompt:
        generation = self.config.generation.model_copy(update={"prompt": prompt})
        pipeline = self.data.pipeline(self.config.model_copy(update={"generation": generation}))
        pipeline.index(self.data.corpus)  # the winner's index, already built: reopened, not rebuilt
        scored = self.data.score(pipeline, questions, on_batch=self._check)
        report = scored.report
        by_id = {q.id: q for q in questions}
        per_question: dict[str, float] = {}
        feedback: dict[str, str] = {}
        for record in report.samples:
            value = self.objective.composite(record.metrics)
            per_question[record.question_id] = value
            feedback[record.question_id] = feedback_text(by_id[record.question_id], record, value)
        return ScoredPrompt(report, self.objective.composite(report.means()), per_question, feedback)

    def _check(self, step: int, report: EvaluationReport) -> None:
        if self.budget is not None and (why := self.budget()) is not None:
            raise BudgetSpent(f"{why}: stopped after {len(report.samples)} questions of a prompt's scoring")


def feedback_text(question: Question, record: SampleRecord, composite: float) -> str:
    """What the reflection model reads about one question: the question, its reference answer, the answer
    given, its metric values and the passages it was given, cut short."""
    refs = references(question, None)
    metrics = ", ".join(f"{k} {v:.2f}" for k, v in record.metrics.items() if v is not None)
    passages = "\n".join(f"[{i}] {' '.join((h.text or '').split())[:PASSAGE_CHARS]}"
                         for i, h in enumerate(record.retrieved[:FEEDBACK_PASSAGES], 1))
    lines = [f"Question: {question.question}",
             f"Reference answer: {' / '.join(refs) if refs else '(none: the passages do not answer it)'}",
             f"Answer given: {record.answer if record.answer is not None else '(none)'}",
             f"Score (the objective's composite): {composite:.3f}; metrics: {metrics or 'none'}"]
    if record.error is not None:
        lines.append(f"Error: {record.error}")
    if passages:
        lines.append(f"Passages (cut short):\n{passages}")
    return "\n".join(lines)


def builtin_prompt(template: str, languages: list[str]) -> UserPrompt:
    """A built-in answer template's text as a team's prompt, one variant per prompt language of
    ``languages``: the seed of a winner that answers with ``generation.template``. The untrusted-data
    sentence is left out: every prompt sent gains it (``composer.prompts.template``)."""
    from composer.generation.prompts import ANSWER_TEMPLATES

    localized = ANSWER_TEMPLATES[template]
    variants: dict[str, dict[str, str]] = {}
    for lang in languages:
        built = localized[lang]  # type: ignore[index]
        system = built.system.removesuffix(f" {UNTRUSTED[lang]}")  # type: ignore[index]
        variants[lang] = {"system": brace_form(system), "user": brace_form(built.user)}
    return UserPrompt.model_validate(variants)


def languages_of(questions: Iterable[Question]) -> list[str]:
    """The prompt languages of the questions, in the order ar, fa, en."""
    found = {conversation_language(q.question, q.history) for q in questions}
    return [lang for lang in ("ar", "fa", "en") if lang in found]


@dataclass(frozen=True)
class Tuning:
    """An optimization made ready for a study: what it runs on and the key its result is stored under."""

    exp: ExperimentConfig
    study: optuna.Study
    data: StudyData
    held_out: QuestionSet
    winner: int
    digest: str
    """The winner's identity (``config_hash``)."""
    config: PipelineConfig
    seed: UserPrompt
    settings: PromptTuningConfig

    @property
    def context(self) -> tuple[str, ...]:
        """What the scores depend on besides the seed, the settings and the questions: the winner and
        the objective's weights (``optimization_key``'s ``context``)."""
        return self.digest, json.dumps(dict(self.data.objective.weights), sort_keys=True)

    @property
    def key(self) -> str:
        return optimization_key(self.seed, self.settings, self.data.questions, self.held_out,
                                self.study.study_name, *self.context)

    def spent_before(self) -> tuple[float, int]:
        """Dollars and requests the study spent before this optimization (every run, every purpose)."""
        totals = finish.study_spend(self.study, self.study.get_trials(deepcopy=False)).totals()
        return float(totals.get("llm_cost_usd", 0.0)), int(totals.get("llm_requests", 0))


def tuning_settings(exp: ExperimentConfig, overrides: Mapping[str, Any] | None = None) -> PromptTuningConfig:
    """The experiment's ``prompt_tuning:`` block (or the defaults) with ``overrides`` over it, checked."""
    base = exp.prompt_tuning.model_dump() if exp.prompt_tuning is not None else {}
    try:
        return PromptTuningConfig.model_validate({**base, **(overrides or {})})
    except ValueError as exc:
        raise ConfigError(f"prompt_tuning: {' '.join(str(exc).split())}", field="prompt_tuning") from None


def prepare(
    exp: ExperimentConfig,
    *,
    study_name: str | None = None,
    seed_prompt: PromptRef | None = None,
    overrides: Mapping[str, Any] | None = None,
    study: optuna.Study | None = None,
    data: StudyData | None = None,
    held_out: QuestionSet | None = None,
) -> Tuning:
    """Make an optimization of the study's winner ready, sending nothing: refused (one located line) for
    a study without a held-out split, without a winner, or a factory's system. ``study``, ``data`` and
    ``held_out``: the running study's own (the staged prompt stage), else loaded."""
    from composer.study._storage import load_study
    from composer.study.inputs import load_inputs

    if exp.split is None:
        raise ConfigError("an optimized prompt is judged on held-out questions, and this experiment keeps "
                          "none: add split: {held_out: 0.3} to it", field="split")
    settings = tuning_settings(exp, overrides)
    if study is None:
        study = load_study(study_name or exp.name, exp.storage_url)
    if data is None:
        inputs = load_inputs(exp, False, None, 8, preflight=False, study_name=study.study_name)
        data, held_out = inputs.data, inputs.held_out
    if held_out is None or not len(held_out):
        raise ConfigError("the held-out split has no question: raise split.held_out", field="split.held_out")
    if data.system is not None:
        raise ConfigError("a user's system answers with its own prompt: tune-prompt needs a pipeline study",
                          field="system")
    data = data.settle(study)
    ranked = ranked_trials(study)
    record = TrialRecord.of(ranked[0]) if ranked else None
    if record is None:
        raise ComposerError(f"study {study.study_name} has no completed trial to take the prompt of: run "
                            "composer optimize first")
    config, digest = data.configure(ranked[0].params)
    if digest != record.config_hash:
        raise ComposerError("the search space or the llm: block changed since the winner ran")
    assert isinstance(config, PipelineConfig)
    if config.generation.model is None:
        raise ConfigError("the winner answers without an LLM (extractive answers): there is no prompt to "
                          "optimize; give the study an llm: block", field="llm")
    seed = seed_of(exp, config, data.questions, held_out, seed_prompt)
    return Tuning(exp, study, data, held_out, ranked[0].number, digest, config, seed, settings)


def seed_of(exp: ExperimentConfig, config: PipelineConfig, selection: QuestionSet, held_out: QuestionSet,
            given: PromptRef | None) -> UserPrompt:
    """The prompt the optimization starts from: the one given, else the winner's; a built-in template's
    in the languages of selection and held-out alike, as both are scored with it."""
    ref = given if given is not None else getattr(config.generation, "prompt", None)
    if ref is None:
        return builtin_prompt(config.generation.template, languages_of([*selection, *held_out]) or ["en"])
    if isinstance(ref, UserPrompt):
        return ref
    from composer.prompts import resolve_prompt

    field = "seed_prompt" if given is not None else "generation.prompt"
    resolved: UserPrompt = resolve_prompt(ref, base=Path.cwd(), tracking_uri=exp.tracking_uri, field=field)
    return resolved


@dataclass(frozen=True)
class StudyResults:
    """``ResultStore`` over the study's user attributes: a finished optimization lives with its study
    (in its storage, shared by every machine that reaches it), and the latest one is marked for the
    study's report."""

    study: optuna.Study

    def get(self, key: str) -> dict[str, Any] | None:
        stored = self.study.user_attrs.get(PROMPT_ATTR + key)
        return stored if isinstance(stored, dict) else None

    def put(self, key: str, data: dict[str, Any]) -> None:
        self.study.set_user_attr(PROMPT_ATTR + key, data)
        self.study.set_user_attr(LATEST_ATTR, key)


def stored(tuning: Tuning) -> PromptOptimization | None:
    """The result of this very optimization, when it finished before (read back, nothing sent)."""
    found = StudyResults(tuning.study).get(tuning.key)
    return None if found is None else replace(PromptOptimization.from_dict(found), requests={})


def run(tuning: Tuning, *, parent_run_id: str | None = None) -> PromptOptimization:
    """Run the optimization (a finished one is read back and sends nothing): every request counted by
    purpose on the study, the study's ``stop:`` budget checked after each batch of questions scored
    (``StudyPromptScorer``) and between candidates, counting what the study spent before; the result
    stored on the study, its MLflow runs nested under ``parent_run_id`` (default: the study's parent run,
    when the store has it)."""
    from composer.llm.spend import Spend
    from composer.llm.usage import track_usage
    from composer.prompt_tuning.engine import optimize
    from composer.tracking.prompt_runs import PromptRunTarget

    exp, study = tuning.exp, tuning.study
    cost_before, requests_before = tuning.spent_before()
    if stored(tuning) is None and (reason := _over(exp, cost_before, requests_before)) is not None:
        raise BudgetSpent(f"{reason} before the optimization: nothing is sent (raise "
                          "stop.max_cost_usd / max_llm_calls to go on)")
    spend = Spend()
    target = PromptRunTarget(exp.tracking_uri, exp.mlflow_experiment,
                             parent_run_id or study_parent_run(exp, study.study_name))
    try:
        with track_usage() as usage:
            def spent() -> str | None:
                return _over(exp, cost_before + usage.cost, requests_before + usage.requests)

            return optimize(
                tuning.seed, StudyPromptScorer(tuning.data, tuning.config, spent), tuning.data.questions,
                tuning.held_out, tuning.settings, study=study.study_name, llm=exp.llm, tracking=target,
                cache_dir=exp.work_dir / "cache" / "llm", budget=spent,
                results=StudyResults(study), context=tuning.context, spend=spend,
            )
    finally:
        finish.record_spend(study, spend)  # the study's later summaries and budgets count it


def stage(
    study: optuna.Study, exp: ExperimentConfig, data: StudyData, held_out: QuestionSet | None,
    parent_run_id: str, console: Console,
) -> dict[str, Any]:
    """The staged ``prompt`` stage (``stages.prompt``), after stage 2 and its held-out re-score: the
    winner's prompt optimized, its runs nested under the study's parent run, its verdict printed; what
    the summary records (``PromptOptimization.to_dict``). A ComposerError (the budget spent, a winner
    without an LLM) skips it in one line, recorded as ``{"skipped": why}``: the study it follows is
    finished, and a rerun must not find it failed."""
    try:
        result = run(prepare(exp, study=study, data=data, held_out=held_out),
                     parent_run_id=parent_run_id or None)
    except ComposerError as exc:
        console.print(f"prompt stage: skipped: {exc}", markup=False, highlight=False)
        return {"skipped": str(exc)}
    for line in verdict_lines(result):
        console.print(f"prompt stage: {line}", markup=False, highlight=False)
    return result.to_dict()


def _over(exp: ExperimentConfig, cost: float, requests: int) -> str | None:
    return budget.over(exp.stop, cost, requests) if budget.limited(exp.stop) else None


def study_parent_run(exp: ExperimentConfig, name: str) -> str | None:
    """The study's MLflow parent run (None: the store has none)."""
    from mlflow import MlflowClient

    from composer.store import sqlite_file
    from composer.tracking.read import study_runs

    file = sqlite_file(exp.tracking_uri)
    if file is not None and not file.exists():
        return None
    client = MlflowClient(exp.tracking_uri)
    found = client.get_experiment_by_name(exp.mlflow_experiment)
    return None if found is None else study_runs(client, found.experiment_id, name)[0]


def estimate(tuning: Tuning) -> TuningEstimate:
    """What the optimization would send (``composer tune-prompt --estimate``); nothing is sent."""
    from composer.cost.calls import Judge
    from composer.cost.passages import StandInPassages
    from composer.cost.prompt_tuning import estimate_tuning
    from composer.prompt_tuning.adapter import REFLECTION_TEMPLATE
    from composer.prompt_tuning.engine import reflection_config

    data, settings = tuning.data, tuning.settings
    judging = data.judging
    return estimate_tuning(
        study=tuning.study.study_name, seed=tuning.seed, config=tuning.config, questions=list(data.questions),
        passages=StandInPassages(data.corpus), llm=data.llm,
        judge=Judge(judging.client.config, judging.settings) if judging is not None else None,
        reflection=reflection_config(settings, tuning.exp.llm), proposals=settings.max_proposals,
        max_metric_calls=settings.max_metric_calls, minibatch=settings.minibatch,
        held_out=len(tuning.held_out), instruction=REFLECTION_TEMPLATE,
    )


def latest(study: optuna.Study) -> PromptOptimization | None:
    """The study's latest finished optimization (None: never optimized)."""
    key = study.user_attrs.get(LATEST_ATTR)
    stored = study.user_attrs.get(PROMPT_ATTR + key) if isinstance(key, str) else None
    return PromptOptimization.from_dict(stored) if stored is not None else None


def verdict_lines(result: PromptOptimization) -> list[str]:
    """The result as ``composer tune-prompt`` prints it: the verdict, the held-out scores with the CI,
    what was registered (or why the seed stays), the requests by purpose."""
    lines = []
    v = result.verdict
    if v is not None:
        low, high = v.ci
        lines.append(f"verdict: {v.outcome} (held-out, {v.n_questions} questions: seed {v.seed_score:.4f}, "
                     f"optimized {v.best_score:.4f}; difference {v.difference:+.4f} 95% CI [{low:+.4f}, "
                     f"{high:+.4f}])")
    else:
        lines.append("verdict: none (no candidate was re-scored on the held-out questions)")
    lines.append(f"candidates: {len(result.candidates)} scored, best #{result.best.index} "
                 f"(selection {result.best.selection_score:.4f}, seed {result.seed.selection_score:.4f})")
    if result.registered is not None:
        lines.append(f"registered: {result.registered}" + (" (promoted)" if result.promoted else ""))
    else:
        lines.append(result.reason if result.reason.startswith("the seed stays") else
                     f"the seed stays: {result.reason}")
    shown = " · ".join(f"{p.replace('_', '-')} {n}" for p, n in result.requests.items() if n)
    lines.append(f"requests: {shown or 'none (read back from the study)'}")
    return lines
