"""The study's question split, read back from an exported best.yaml: ``eval --split`` and
``composer.evaluate(split=...)`` score the questions the trials were chosen on, or those held out; and
the stratified pick of ``max_questions`` that makes a smoke study without a hand-made subset file."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from composer.data.types import QuestionSet
from composer.errors import ConfigError, InputError
from composer.settings import Strict

if TYPE_CHECKING:
    from composer.data.types import Question
    from composer.protocols import Split


class SplitConfig(Strict):
    """Hold questions out of the search to re-score the winner on data it was not chosen on."""

    held_out: float = Field(gt=0.0, lt=1.0, description="Fraction of the questions held out.")
    seed: int = 0


def split_questions(
    questions: QuestionSet, split: SplitConfig | None
) -> tuple[QuestionSet, QuestionSet | None]:
    """Selection and held-out sets by a seeded hash of each conversation (a question that stands alone is
    a conversation of one, hashed by its id): the same sets whatever the file's order, and a
    conversation's turns all on one side, since they are not independent.

    Both keep the file's order, so batches (and pruning steps) see the same questions in every trial.
    """
    if split is None:
        return questions, None
    held = _fill(seeded_order(questions, split.seed), round(len(questions) * split.held_out))
    if not held or len(held) == len(questions):
        n_conversations = len(questions.conversations())
        whole = (f" (in {n_conversations} conversations, each kept whole)"
                 if n_conversations < len(questions) else "")
        raise ConfigError(
            f"holding out {split.held_out:.0%} of {len(questions)} questions{whole} leaves a side empty",
            field="split.held_out",
        )
    return (
        QuestionSet([q for q in questions if q.id not in held], questions.source),
        QuestionSet([q for q in questions if q.id in held], questions.source),
    )


def study_questions(
    questions: QuestionSet, max_questions: int | None, split: SplitConfig | None
) -> QuestionSet:
    """The questions a study runs on (before its split): all, or ``max_questions`` of them picked under
    the split's seed (0 without a split)."""
    if max_questions is None:
        return questions
    return stratified_pick(questions, max_questions, split.seed if split is not None else 0)


def stratified_pick(questions: QuestionSet, n: int, seed: int) -> QuestionSet:
    """``n`` of the questions, each stratum (answerable or not, by language) keeping its share of the set
    (largest remainders; every stratum at least one while ``n`` allows), picked within a stratum by a
    seeded hash of each conversation: the same questions whatever the file's order. A conversation is
    picked whole, in the stratum of its first question, so the count may miss ``n`` by part of one. The
    file's order is kept, so batches see them as the whole set would. All of them when ``n`` is not
    smaller."""
    if n >= len(questions):
        return questions
    strata: dict[tuple[bool, str], list[Question]] = {}
    for conversation in questions.conversations().values():
        strata.setdefault(_stratum(conversation[0]), []).extend(conversation)
    exact = {key: n * len(members) / len(questions) for key, members in strata.items()}
    counts = {key: int(share) for key, share in exact.items()}
    by_remainder = sorted(strata, key=lambda key: (counts[key] > 0, -(exact[key] - counts[key]), key))
    for key in by_remainder[: n - sum(counts.values())]:
        counts[key] += 1
    picked: set[str] = set()
    for key, members in strata.items():
        picked.update(_fill(seeded_order(members, seed), counts[key]))
    return questions.subset(sorted(picked))


def seeded_order(questions: Iterable[Question], seed: int) -> list[Question]:
    """The questions ordered by a seeded hash of each conversation key (``Question.conversation``, a
    standalone question's own id): the same order whatever the file's, so a split or a pick by it takes
    the same questions however the file is sorted, and a conversation's questions stay together."""
    return sorted(questions, key=lambda q: hashlib.sha256(f"{seed}:{q.conversation}".encode()).hexdigest())


def _fill(ranked: list[Question], n: int) -> set[str]:
    """The ids of whole conversations taken in ``ranked``'s order towards ``n`` questions: one is taken
    while it brings the count no further from ``n`` than it is (one by one for questions that stand
    alone: the first ``n``), and skipped for a smaller one after it otherwise."""
    taken: set[str] = set()
    for _, group in groupby(ranked, key=lambda q: q.conversation):
        ids = [q.id for q in group]
        if len(taken) + len(ids) - n <= n - len(taken):
            taken.update(ids)
    return taken


def _stratum(q: Question) -> tuple[bool, str]:
    """Answerable (something to retrieve or answer) or not, and the question's language."""
    from composer.text import detect_language

    return bool(q.relevant_ids or q.gold_answers), detect_language(q.question)


def study_split(questions: QuestionSet, export: Path, split: Split) -> QuestionSet:
    """The study's selection or held-out questions, split by the seed and share its export recorded
    (``provenance.split``), so that ``eval --config best.yaml --split selection`` gives the trial's
    figures; ``all``: every question."""
    from composer.yamlfile import read_yaml

    if split == "all":
        return questions
    doc = read_yaml(export, what="pipeline file")
    provenance = doc.get("provenance") if isinstance(doc, dict) else None
    if not isinstance(provenance, dict) or "split" not in provenance:
        raise InputError("--split needs the study's split: give the best.yaml `composer export` wrote",
                         path=export, field="provenance.split")
    study = provenance.get("study")
    config = None if provenance["split"] is None else SplitConfig.model_validate(provenance["split"])
    questions = study_questions(questions, provenance.get("max_questions"), config)
    if config is None:
        if split == "held_out":
            raise InputError(f"study {study} held no questions out: all were selection questions",
                             path=export, field="provenance.split")
        selection, held = questions, None
    else:
        selection, held = split_questions(questions, config)
    expected = provenance.get("selection_fingerprint")
    if expected and selection.fingerprint() != expected:
        logging.getLogger("composer").warning(
            "%s: these are not the questions study %s was run on (its selection set differs): the scores "
            "will not be the trial's", questions.source, study)
    return selection if split == "selection" or held is None else held
