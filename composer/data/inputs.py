"""What a library call is given as data (a path, a DataFrame, a list of dicts, or Composer's own types) as
Composer's types, and in-memory data written once as a file, so a study's provenance names files."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from composer.data.corpus import load_corpus
from composer.data.questions import load_questions
from composer.data.types import Corpus, QuestionSet
from composer.files import write_atomic

# The sources are typed ``object``: what ``load_corpus`` and ``load_questions`` read (``composer.protocols``
# names their shapes, but sits above data/).


def as_corpus(corpus: object) -> Corpus | None:
    """``corpus`` as a ``Corpus``: loaded unless it is one (or None)."""
    if corpus is None or isinstance(corpus, Corpus):
        return corpus
    return load_corpus(corpus)


def as_question_set(questions: object, corpus: Corpus | None) -> QuestionSet:
    """``questions`` as a ``QuestionSet``: loaded (its ids checked against ``corpus``) unless it is one."""
    if isinstance(questions, QuestionSet):
        return questions
    return load_questions(questions, corpus=corpus)


def corpus_file(corpus: object, folder: Path) -> Path:
    """A path as given; an in-memory corpus as JSON Lines under ``folder``, named by its content."""
    if isinstance(corpus, str | Path):
        return Path(corpus).resolve()
    docs = as_corpus(corpus)
    assert docs is not None
    rows = [
        {
            "id": d.id,
            "title": d.title,
            "text": d.text,
            **({"metadata": dict(d.metadata)} if d.metadata else {}),
        }
        for d in docs
    ]
    return _rows_once(folder, "corpus", rows)


def questions_file(questions: object, folder: Path) -> Path:
    """A path as given; an in-memory question set as JSON Lines under ``folder``, named by its content."""
    if isinstance(questions, str | Path):
        return Path(questions).resolve()
    rows = [
        {
            "id": q.id,
            "question": q.question,
            "relevant_ids": list(q.relevant_ids),
            "answers": list(q.answers),
            "context": list(q.context),
            **({"reference_answer": q.reference_answer} if q.reference_answer else {}),
            **({"conversation_id": q.conversation_id} if q.conversation_id is not None else {}),
            **({"turn": q.turn} if q.turn is not None else {}),
            **({"history": [t.to_dict() for t in q.history]} if q.history else {}),
            **({"standalone": q.standalone} if q.standalone is not None else {}),
        }
        for q in as_question_set(questions, None)
    ]
    return _rows_once(folder, "questions", rows)


def _rows_once(folder: Path, kind: str, rows: Sequence[Mapping[str, object]]) -> Path:
    text = "".join(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in rows)
    return write_once(folder, kind, ".jsonl", text)


def write_once(folder: Path, kind: str, suffix: str, text: str) -> Path:
    """``text`` as ``<kind>-<digest><suffix>`` under ``folder``, written only if absent: a changed input is a
    new file, and the same input names the same file."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    path = folder / f"{kind}-{digest}{suffix}"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)
    return path
