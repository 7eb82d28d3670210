"""A Persian conversational question set from PersianQA, made by rule as examples/arcd-conversations was by
hand: the questions asked on one article become a conversation, the first naming its subject, the others
asking about it as «آن» or «او». PersianQA is GPL-3.0, so the set is built from the user's copy and never
shipped.

    .venv/bin/python benchmarks/build_persian_conversations.py --persianqa PATH/TO/persianqa --out FILE

``--persianqa`` is the folder docs/how-to/analyzers.md#persianqa describes (``corpus.jsonl`` with each
article's ``title``, ``questions.jsonl``). ``FILE`` holds one conversation per line (docs/reference/
input-formats.md#conversations); each follow-up keeps its question's labels and has it as its gold
``standalone`` rewrite. Prints how many conversations and follow-ups it wrote.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from composer.data import Question, load_corpus, load_questions
from composer.files import write_atomic

PERSON_CUES = ("کیست", "کی بود", "متولد", "زاده", "درگذشت", "همسر", "ازدواج", "پدر", "مادر", "فرزند")
"""Words of the questions on an article about a person: its subject becomes «او», else «آن»."""

_PARENTHESES = re.compile(r"\s*\([^)]*\)\s*")


def same_letters(text: str) -> str:
    """Arabic yeh and kaf as Persian writes them, so that a title and a question spelt either way match."""
    return text.replace("ي", "ی").replace("ك", "ک").replace("\u200c", " ")


def subject(title: str) -> str:
    """The words an article's questions name it by: its title without a parenthesised disambiguation."""
    return same_letters(_PARENTHESES.sub(" ", title)).strip()


def follow_up(question: str, name: str, pronoun: str) -> str | None:
    """``question`` asked about «``pronoun``» instead of ``name``; None when it does not name it. The
    question keeps its own spelling (``same_letters`` maps one character to one, so positions agree)."""
    at = same_letters(question).find(name)
    if len(name) < 2 or at < 0:
        return None
    return re.sub(r"\s+", " ", question[:at] + pronoun + question[at + len(name):]).strip()


def conversation(doc_id: str, title: str, questions: list[Question]) -> dict[str, Any] | None:
    """One conversation of an article's questions: the first naming its subject as asked, then each
    other one naming it as a follow-up; None when fewer than two name it."""
    name = subject(title)
    pronoun = "او" if any(cue in same_letters(q.question) for q in questions for cue in PERSON_CUES) else "آن"
    naming = [q for q in questions if follow_up(q.question, name, pronoun) is not None]
    if len(naming) < 2:
        return None
    turns: list[dict[str, object]] = []
    for n, q in enumerate(naming):
        turn: dict[str, object] = {"role": "user", "text": q.question, "relevant_ids": list(q.relevant_ids),
                                   "answers": list(q.answers), "metadata": {"persianqa_id": q.id}}
        if q.reference_answer is not None:
            turn["reference_answer"] = q.reference_answer
        if n > 0:
            turn["text"], turn["standalone"] = follow_up(q.question, name, pronoun), q.question
        turns.append(turn)
        if n < len(naming) - 1 and q.gold_answers:
            turns.append({"role": "assistant", "text": q.gold_answers[0]})
    return {"id": f"conv-{doc_id}", "turns": turns}


def build(folder: Path) -> list[dict[str, Any]]:
    """The conversations of every article of PersianQA in ``folder`` that two questions name."""
    corpus = load_corpus(folder / "corpus.jsonl")
    questions = load_questions(folder / "questions.jsonl", corpus=corpus)
    by_doc: dict[str, list[Question]] = {}
    for q in questions:
        if len(q.relevant_ids) == 1:
            by_doc.setdefault(q.relevant_ids[0], []).append(q)
    made = (conversation(doc.id, doc.title or "", by_doc.get(doc.id, [])) for doc in corpus)
    return [c for c in made if c is not None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--persianqa", type=Path, required=True,
                        help="PersianQA's folder in Composer's layout")
    parser.add_argument("--out", type=Path, required=True, help="the conversational question set to write")
    args = parser.parse_args()
    conversations = build(args.persianqa)
    write_atomic(args.out, "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in conversations))
    follow_ups = sum(1 for c in conversations for t in c["turns"] if "standalone" in t)
    print(f"{len(conversations)} conversations, {follow_ups} follow-ups -> {args.out}")


if __name__ == "__main__":
    main()
