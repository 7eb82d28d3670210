"""A study directory over examples/arcd-sample, as the study tests write it."""

from __future__ import annotations

from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "arcd-sample"


def write_sample_study(root: Path, *, space: str, experiment: str, n_questions: int) -> Path:
    """``questions.jsonl`` (the sample's first ``n_questions``), ``space.yaml`` and ``experiment.yaml``
    in ``root``; ``experiment`` is formatted with ``corpus``, the sample corpus. Returns the experiment."""
    lines = (SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()[:n_questions]
    (root / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "space.yaml").write_text(space, encoding="utf-8")
    path = root / "experiment.yaml"
    path.write_text(experiment.format(corpus=SAMPLE / "corpus.jsonl"), encoding="utf-8")
    return path
