"""What a study runs on: the experiment's search space, corpus and questions, loaded and split, with every
setting checked before the first trial; and their provenance, stored on the study and checked when it
resumes (a study continued on other data would rank trials scored on different questions together)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer.data.types import Corpus, QuestionSet
from composer.errors import ConfigError, InputError, option
from composer.evaluation.splits import split_questions, study_questions
from composer.llm.preflight import check_reachable
from composer.protocols import SystemFactory
from composer.record import SCHEMA
from composer.study import budget
from composer.study.data import PINS_ATTR, StudyData
from composer.study.experiment import ExperimentConfig, import_factory
from composer.study.leaderboard import STUDY_ATTR
from composer.study.space import SearchSpace, language_warning
from composer.study.space_file import load_search_space
from composer.version import composer_version

if TYPE_CHECKING:
    import optuna


@dataclass(frozen=True)
class Inputs:
    """What a study runs on: its trials' data (the selection questions), the whole question set, its
    file (and whether it was generated just now), and the held-out questions."""

    data: StudyData
    questions: QuestionSet
    questions_file: Path
    generated: bool
    held_out: QuestionSet | None


def load_inputs(
    exp: ExperimentConfig, strict: bool, system: SystemFactory | None, concurrency: int, *,
    preflight: bool = True, study_name: str | None = None,
) -> Inputs:
    """Load the experiment's space, corpus and questions, split them, and check every setting no trial
    could run with here, before the study starts, not once per trial: an unset key variable, a judge
    without a model, an objective nothing can score, an LLM out of reach (unless not ``preflight``). The
    space's registry prompts resolve as the study ``study_name`` (default: the experiment's) pinned them."""
    from composer.data import load_corpus
    from composer.pipeline.workspace import use_caches

    use_caches(exp.work_dir, exp.caches)  # before the judge or a trial opens the work dir's caches
    if system is None and exp.system is not None:
        system = import_factory(exp.system)
    space, pins = load_search_space(exp.search_space, free=system is not None).prompts_resolved(
        exp.tracking_uri, stored_pins(exp.storage_url, study_name or exp.name))
    corpus = load_corpus(exp.corpus) if exp.corpus is not None else Corpus([], "<none>")
    questions, questions_file, generated = questions_of(exp, corpus, strict)
    questions = study_questions(questions, exp.max_questions, exp.split)
    selection, held_out = split_questions(questions, exp.split)
    mismatch = language_warning(space, [d.text for d in corpus.documents[:500]])
    if mismatch:
        logging.getLogger(__name__).warning("%s", mismatch)
    data = StudyData(
        corpus=corpus,
        questions=selection,
        space=space,
        objective_config=exp.objective,
        workdir=exp.work_dir,
        qdrant=exp.qdrant,
        batch_size=exp.batch_size,
        llm=exp.llm,
        judge=exp.judge,
        system=system,
        concurrency=concurrency,
        prompt_pins=pins,
    )
    if exp.llm is not None:
        exp.llm.api_key()
    data.objective  # noqa: B018 - resolves (and warns about) the objective once, building the judge
    budget.check_prices(data, exp.stop if preflight else None)
    if preflight:
        check_reachable(data.llm_endpoints())
    return Inputs(data, questions, questions_file, generated, held_out)


def stored_pins(storage: str, name: str) -> dict[str, str]:
    """The registry prompts the stored study ``name`` pinned (``PINS_ATTR``); none for a new study."""
    from composer.study._storage import load_study

    try:
        study = load_study(name, storage)
    except InputError:  # no study yet: its first run pins them
        return {}
    return dict(study.user_attrs.get(PINS_ATTR) or {})


def questions_of(exp: ExperimentConfig, corpus: Corpus, strict: bool) -> tuple[QuestionSet, Path, bool]:
    """The study's question set, its file, and whether it was generated just now: the experiment's file,
    or the set ``synth:`` generates (once per corpus and settings, then read from the workdir's cache)."""
    from composer.data import load_questions

    if exp.synth is None:
        assert exp.questions is not None
        # Without a corpus (a user's system searching its own collection) no id can be checked against it.
        known = corpus if exp.corpus is not None else None
        return load_questions(exp.questions, corpus=known, strict=strict), exp.questions, False
    from composer.synth import cache_path, synthesize_cached

    path = cache_path(corpus, exp.synth, exp.work_dir)
    generated = not path.exists()
    return synthesize_cached(corpus, exp.synth, exp.work_dir), path, generated


def study_provenance(
    exp: ExperimentConfig,
    space: SearchSpace,
    corpus_fp: str,
    questions_file: Path,
    questions: QuestionSet,
    selection: QuestionSet,
) -> dict[str, Any]:
    """What the study was run on; stored on the study, exported with the winner."""
    return {
        "experiment": exp.name,
        "corpus": str(exp.corpus) if exp.corpus is not None else None,
        "system": exp.system,
        "corpus_fingerprint": corpus_fp,
        "questions": str(questions_file),
        "questions_fingerprint": questions.fingerprint(),
        "selection_fingerprint": selection.fingerprint(),
        "n_selection": len(selection),
        "split": None if exp.split is None else exp.split.model_dump(),
        "max_questions": exp.max_questions,
        "search_space": space.source,
        "factory": space.free,
        "k_eval": exp.objective.k,
        "objective": exp.objective.model_dump(),
        "composer_version": composer_version(),
        "record_schema": SCHEMA,
    }


def check_same_data(study: optuna.Study, provenance: dict[str, Any]) -> None:
    """Continuing a study on changed data would rank trials scored on different questions together."""
    stored = study.user_attrs.get(STUDY_ATTR)
    if stored is None:
        study.set_user_attr(STUDY_ATTR, {**provenance, "created": datetime.now(timezone.utc).isoformat()})
        return
    for key in ("corpus_fingerprint", "selection_fingerprint", "k_eval", "record_schema"):
        if stored.get(key) != provenance[key]:
            raise ConfigError(
                f"study '{study.study_name}' was run with another {key.replace('_', ' ')} "
                f"({stored.get(key)} vs {provenance[key]}); use another study name "
                f"({option('study_name', 'NEW')})",
                field=key,
            )
