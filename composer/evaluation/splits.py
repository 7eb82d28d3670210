"""The study's question split, read back from an exported best.yaml: ``eval --split`` and
``composer.evaluate(split=...)`` score the questions the trials were chosen on, or those held out."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from composer.errors import InputError

if TYPE_CHECKING:
    from composer.data.types import QuestionSet
    from composer.protocols import Split


def study_split(questions: QuestionSet, export: Path, split: Split) -> QuestionSet:
    """The study's selection or held-out questions, split by the seed and share its export recorded
    (``provenance.split``), so that ``eval --config best.yaml --split selection`` gives the trial's
    figures; ``all``: every question."""
    from composer.study.experiment import SplitConfig
    from composer.study.study import split_questions
    from composer.yamlfile import read_yaml

    if split == "all":
        return questions
    doc = read_yaml(export, what="pipeline file")
    provenance = doc.get("provenance") if isinstance(doc, dict) else None
    if not isinstance(provenance, dict) or "split" not in provenance:
        raise InputError("--split needs the study's split: give the best.yaml `composer export` wrote",
                         path=export, field="provenance.split")
    study = provenance.get("study")
    if provenance["split"] is None:
        if split == "held_out":
            raise InputError(f"study {study} held no questions out: all were selection questions",
                             path=export, field="provenance.split")
        selection, held = questions, None
    else:
        selection, held = split_questions(questions, SplitConfig.model_validate(provenance["split"]))
    expected = provenance.get("selection_fingerprint")
    if expected and selection.fingerprint() != expected:
        logging.getLogger("composer").warning(
            "%s: these are not the questions study %s was run on (its selection set differs): the scores "
            "will not be the trial's", questions.source, study)
    return selection if split == "selection" or held is None else held
