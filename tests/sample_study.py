"""A study directory over examples/arcd-sample, as the study tests write it: one factory for experiments
and spaces, so a test states only what its promise depends on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from composer.data import load_corpus, load_questions
from composer.data.types import Corpus, QuestionSet

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "arcd-sample"

# The smallest study that runs: BM25, two values of k, two random trials, no traces.
BM25_DIMS: dict[str, Any] = {"retrieval.mode": {"choices": ["bm25"]}, "retrieval.k": {"choices": [3, 5]}}
BASE_EXPERIMENT: dict[str, Any] = {
    "name": "s",
    "questions": "questions.jsonl",
    "search_space": "space.yaml",
    "sampler": {"name": "random", "seed": 0},
    "pruner": "none",
    "n_trials": 2,
    "mlflow": {"traces": 0},
}


def sample_corpus() -> Corpus:
    """The sample's corpus (a fresh copy: a test may not see another's changes)."""
    return load_corpus(SAMPLE / "corpus.jsonl")


def sample_questions(corpus: Corpus, n_questions: int) -> QuestionSet:
    """The sample's first ``n_questions``, checked against ``corpus``."""
    full = load_questions(SAMPLE / "questions.jsonl", corpus=corpus)
    return QuestionSet(full.questions[:n_questions], full.source)


def write_questions(root: Path, n_questions: int) -> Path:
    """``root/questions.jsonl``: the sample's first ``n_questions``; returns its path."""
    lines = (SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()[:n_questions]
    path = root / "questions.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_space(root: Path, dims: dict[str, Any], *, defaults: dict[str, Any] | None = None,
                name: str = "space.yaml") -> Path:
    """``root/name`` with these dimensions (and defaults); returns its path."""
    space: dict[str, Any] = {"defaults": defaults} if defaults else {}
    path = root / name
    path.write_text(yaml.safe_dump({**space, "dimensions": dims}, sort_keys=False), encoding="utf-8")
    return path


def write_experiment(root: Path, *, dims: dict[str, Any] | None = None,
                     defaults: dict[str, Any] | None = None, n_questions: int = 20,
                     file: str = "experiment.yaml", **fields: Any) -> Path:
    """``questions.jsonl`` (the sample's first ``n_questions``), the search space (``dims``, else BM25 over
    two k, with ``defaults``) in the file its ``search_space`` field names, and ``file`` in ``root``:
    BASE_EXPERIMENT on the sample corpus with ``fields`` over it (a field given as None is left out).
    Several experiments may share one ``root``. Returns the experiment's path."""
    write_questions(root, n_questions)
    experiment = {"corpus": str(SAMPLE / "corpus.jsonl"), **BASE_EXPERIMENT, **fields}
    write_space(root, BM25_DIMS if dims is None else dims, defaults=defaults, name=experiment["search_space"])
    path = root / file
    kept = {key: value for key, value in experiment.items() if value is not None}
    path.write_text(yaml.safe_dump(kept, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def write_sample_study(root: Path, *, space: str, experiment: str, n_questions: int) -> Path:
    """As ``write_experiment``, from YAML text: ``experiment`` is formatted with ``corpus``, the sample
    corpus. For the tests whose files are their subject (comments, flow style, text replaced)."""
    write_questions(root, n_questions)
    (root / "space.yaml").write_text(space, encoding="utf-8")
    path = root / "experiment.yaml"
    path.write_text(experiment.format(corpus=SAMPLE / "corpus.jsonl"), encoding="utf-8")
    return path
