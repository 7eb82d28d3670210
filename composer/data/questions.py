"""Question sets from files, DataFrames or lists of dicts, checked against the corpus they are asked on.

Fields (names match case-insensitively; aliases are the names of the tools users come from):

- ``id``, also ``qid``, ``query_id``, ``question_id``; missing ids are generated (below).
- ``question``, also ``query``, ``user_input`` (Ragas); required and non-empty.
- ``relevant_ids``, also ``relevant``: document ids, or chunk ids ``<doc id>#<n>``; a blank id in a
  list (``["d1", ""]``) is an error naming the row; a blank field means none.
- ``reference_answer``, also ``answer``, ``ground_truth``, ``reference`` (Ragas).
- ``answers``, also ``ground_truths``: every gold answer (SQuAD's ``{"text": [...]}`` works too).
- ``context``, also ``contexts``, ``reference_contexts`` (Ragas): gold context passages.
- ``metadata``: an object; every other column is added to it.
- ``conversation_id``, also ``session_id``, ``thread_id``; ``turn``, also ``turn_no``, ``turn_number``;
  ``history``, also ``chat_history``, or OpenAI's ``messages``; ``standalone``, also ``rewrite``,
  ``standalone_question``: a question in a conversation (see :mod:`composer.data.conversations`, which
  also reads files of one conversation per line).

A missing id is ``q-`` + the first 12 hex digits of SHA-1 of the question text (``-2``, ``-3``... for
repeats of the same text), so it is stable across runs and does not depend on the other rows. List cells
in tables follow :mod:`composer.data.fields`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from composer.data.conversations import (
    as_turn_number,
    as_turns,
    check_conversations,
    expand_conversation,
    over_limit,
    question_of_messages,
)
from composer.data.fields import (
    IdMaker,
    Where,
    as_id,
    as_list,
    as_metadata,
    as_text,
    parse_row_items,
    split_fields,
)
from composer.data.readers import read_source
from composer.data.types import Corpus, Question, QuestionSet
from composer.errors import InputError
from composer.unicode import invisible_only

logger = logging.getLogger(__name__)

_ALIASES = {
    **dict.fromkeys(("id", "qid", "query_id", "question_id"), "id"),
    **dict.fromkeys(("question", "query", "user_input"), "question"),
    **dict.fromkeys(("relevant_ids", "relevant"), "relevant_ids"),
    **dict.fromkeys(("reference_answer", "answer", "ground_truth", "reference"), "reference_answer"),
    **dict.fromkeys(("answers", "ground_truths"), "answers"),
    **dict.fromkeys(("context", "contexts", "reference_contexts"), "context"),
    "metadata": "metadata",
    **dict.fromkeys(("conversation_id", "session_id", "thread_id"), "conversation_id"),
    **dict.fromkeys(("turn", "turn_no", "turn_number"), "turn"),
    **dict.fromkeys(("history", "chat_history"), "history"),
    "messages": "messages",
    **dict.fromkeys(("standalone", "rewrite", "standalone_question"), "standalone"),
}

_LABELS = frozenset(name for name, canonical in _ALIASES.items() if canonical in (
    "id", "relevant_ids", "reference_answer", "answers", "context", "standalone"))
"""What makes a user turn of a conversation line a question (see ``expand_conversation``)."""


def load_questions(source: Any, *, corpus: Corpus | None = None, strict: bool = False) -> QuestionSet:
    """Load and validate a question set.

    ``source`` is a path (.jsonl, .json, .csv, .tsv, .xlsx, .parquet), a pandas DataFrame or a list of dicts.
    With ``corpus``, relevant ids that name no document (nor a chunk of one) are reported: a warning on the
    ``composer.data.questions`` logger, or an InputError when ``strict`` or when none is in the corpus
    (every retrieval metric would be 0: the question set belongs to another corpus).
    """
    records = read_source(source)
    conversation_ids = IdMaker("c")
    rows = parse_row_items(records, "question", "q", lambda row, where, make_id: [
        _question(question_row, where, make_id)
        for question_row in expand_conversation(row, where, conversation_ids, _LABELS)])
    check_conversations(rows, records.source)
    question_set = QuestionSet([q for _, q in rows], records.source)
    if corpus is not None:
        _check_relevant_ids(question_set, [line for line, _ in rows], corpus, strict=strict)
    return question_set


def unknown_relevant_ids(questions: Iterable[Question], corpus: Corpus) -> list[str]:
    """Distinct relevant ids, in order of appearance, that are neither a document nor ``<doc id>#<n>``."""
    unknown: dict[str, None] = {}
    for q in questions:
        for rid in q.relevant_ids:
            if not _in_corpus(rid, corpus):
                unknown.setdefault(rid, None)
    return list(unknown)


def _question(row: dict[str, Any], where: Where, make_id: IdMaker) -> Question:
    fields, extra = split_fields(row, _ALIASES, where)
    text = as_text(fields.get("question"), where, "question")
    history = as_turns(fields.get("history"), where, "history")
    if "messages" in fields:
        if history:
            raise where.error("both 'history' and 'messages' given; keep one", field="messages")
        history, text = question_of_messages(as_turns(fields["messages"], where, "messages"), text, where)
    if text is None or not text.strip():
        raise where.error("missing question text", field="question")
    if (invisible := invisible_only(text)) is not None:
        raise where.error(f"question text shows nothing ({invisible})", field="question")
    text = text.strip()
    relevant = as_list(fields.get("relevant_ids"), where, "relevant_ids", ids=True)
    reference = (as_text(fields.get("reference_answer"), where, "reference_answer") or "").strip()
    if (too_long := over_limit(history)) is not None:
        raise where.error(too_long, field="history")
    turn = as_turn_number(fields.get("turn"), where)
    conversation = as_id(fields.get("conversation_id"), where, "conversation_id")
    position = 1 + sum(t.role == "user" for t in history)
    if turn is not None and turn != position:
        raise where.error(f"turn {turn}, but its history holds {position - 1} earlier user turn(s): a "
                          "history holds every earlier turn, oldest first (or write one conversation per "
                          "line: {id, turns})", field="turn")
    if history or conversation is not None:
        turn = position  # a conversation's first turn is turn 1, so two of them are caught as a repeat
    standalone = (as_text(fields.get("standalone"), where, "standalone") or "").strip()
    return Question(
        id=as_id(fields.get("id"), where) or make_id.make(text),
        question=text,
        relevant_ids=tuple(dict.fromkeys(relevant)),
        reference_answer=reference or None,
        answers=tuple(a.strip() for a in as_list(fields.get("answers"), where, "answers", ids=False)),
        context=as_list(fields.get("context"), where, "context", ids=False),
        metadata={**extra, **as_metadata(fields.get("metadata"), where)},
        conversation_id=conversation,
        turn=turn,
        history=history,
        standalone=standalone or None,
    )


def _check_relevant_ids(questions: QuestionSet, lines: list[int], corpus: Corpus, *, strict: bool) -> None:
    unknown = unknown_relevant_ids(questions, corpus)
    if not unknown:
        return
    total = len({rid for q in questions for rid in q.relevant_ids})
    examples = ", ".join(unknown[:3])
    message = (
        f"{len(unknown)} of {total} relevant ids are not in the corpus {corpus.source} (e.g. {examples})"
    )
    if len(unknown) == total:
        message = (f"none of the {total} relevant ids is in the corpus {corpus.source} (e.g. {examples}): "
                   "is this question set for another corpus?")
    if strict or len(unknown) == total:
        bad = set(unknown)
        pairs = zip(questions, lines, strict=True)
        first = next(line for q, line in pairs if bad.intersection(q.relevant_ids))
        raise InputError(message, path=questions.source, line=first, field="relevant_ids")
    logger.warning("%s: %s", questions.source, message)


def _in_corpus(item_id: str, corpus: Corpus) -> bool:
    if item_id in corpus:
        return True
    doc_id, sep, index = item_id.rpartition("#")
    return bool(sep) and index.isdigit() and doc_id in corpus
