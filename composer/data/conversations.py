"""Conversations in question sets: earlier turns in the shapes users bring them (Composer's ``history``,
OpenAI's ``messages``, LangChain's ``chat_history``), files of one conversation per line, and the checks
that keep a conversation's turns in order and its histories agreeing.

A follow-up is scored on what it leans on, so a history that is garbled (a misspelt role, an empty turn,
turns out of order, two versions of one conversation) would score the wrong question: each is an error
naming its line, never a guess.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from composer.data.fields import IdMaker, Where, as_id
from composer.data.types import Question, Role, Turn
from composer.errors import InputError
from composer.unicode import invisible_only

HISTORY_TURNS_ENV = "COMPOSER_MAX_HISTORY_TURNS"
HISTORY_CHARS_ENV = "COMPOSER_MAX_HISTORY_CHARS"
MAX_HISTORY_TURNS = 50
MAX_HISTORY_CHARS = 20_000
"""The longest history a question (or a served request) may carry, in turns and in characters of its
turns' text: far beyond any real chat, and small enough that a runaway log cannot fill a prompt."""

_ROLES: dict[str, Role] = {"user": "user", "human": "user", "assistant": "assistant", "ai": "assistant"}
_INSTRUCTIONS = frozenset({"system", "developer"})
"""Roles of instructions to a model (OpenAI's, LangChain's): not turns of the conversation, so dropped."""



def history_limits() -> tuple[int, int]:
    """(turns, characters) a history may hold: ``$COMPOSER_MAX_HISTORY_TURNS`` and
    ``$COMPOSER_MAX_HISTORY_CHARS``, else ``MAX_HISTORY_TURNS`` and ``MAX_HISTORY_CHARS``."""
    return _env_int(HISTORY_TURNS_ENV, MAX_HISTORY_TURNS), _env_int(HISTORY_CHARS_ENV, MAX_HISTORY_CHARS)


def over_limit(history: Sequence[Turn]) -> str | None:
    """Why ``history`` is over a cap of ``history_limits``, said for a user; None when it is within them."""
    turns, chars = history_limits()
    if len(history) > turns:
        return f"a history of {len(history)} turns is over the cap of {turns} (${HISTORY_TURNS_ENV})"
    size = sum(len(t.text) for t in history)
    if size > chars:
        return f"a history of {size} characters is over the cap of {chars} (${HISTORY_CHARS_ENV})"
    return None


def as_turns(value: Any, where: Where, name: str) -> tuple[Turn, ...]:
    """Turns, oldest first, from a list of ``{role, text}``, ``{role, content}`` (OpenAI), ``{type,
    content}`` or ``[role, text]`` pairs (LangChain), or a JSON array in a table's cell. Roles ``human`` and
    ``ai`` are ``user`` and ``assistant``; ``system`` and ``developer`` messages are dropped."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return ()
    if isinstance(value, str) and where.tabular:
        value = _json_cell(value, where, name)
    if not isinstance(value, (list, tuple)):
        raise where.error(f"expected a list of turns, got {type(value).__name__}", field=name)
    turns = (_turn(item, where, f"{name}[{n}]") for n, item in enumerate(value))
    return tuple(t for t in turns if t is not None)


def question_of_messages(
    messages: tuple[Turn, ...], question: str | None, where: Where
) -> tuple[tuple[Turn, ...], str]:
    """(history, question) of OpenAI-style ``messages``. Without ``question`` the question is the last
    message, which must be the user's; with it, a last user message that repeats it is dropped (chat logs
    end with the message being answered), and any other is kept as history."""
    if question is None:
        if not messages or messages[-1].role != "user":
            raise where.error("without 'question', the last of 'messages' must be the user's question",
                              field="messages")
        return messages[:-1], messages[-1].text
    if messages and messages[-1].role == "user" and messages[-1].text == question.strip():
        return messages[:-1], question
    return messages, question


def as_turn_number(value: Any, where: Where) -> int | None:
    """A 1-based turn number; ``2.0`` (spreadsheets) is 2."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    number = value
    if isinstance(value, str):
        number = int(value) if value.strip().isdecimal() and value.strip().isascii() else None
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise where.error(f"expected a turn number from 1, got {value!r}", field="turn")
    return number


def expand_conversation(
    row: dict[str, Any], where: Where, make_id: IdMaker, labels: frozenset[str]
) -> list[dict[str, Any]]:
    """The question rows of one conversation-per-line row ``{id, turns: [...]}``: one per user turn that
    carries one of ``labels`` (lower-case field names: an id, relevant ids, answers...), its id
    ``<conversation id>#<turn>`` unless it has its own, the turns before it as its history. A row
    without ``turns`` is itself the one question row."""
    key = next((k for k in row if k.strip().lower() == "turns"), None)
    if key is None:
        return [row]
    rest = {k: v for k, v in row.items() if k != key}
    given = next((k for k in rest if k.strip().lower() in ("id", "conversation_id")), None)
    raw_turns = row[key]
    if isinstance(raw_turns, str) and where.tabular:
        raw_turns = _json_cell(raw_turns, where, "turns")
    if not isinstance(raw_turns, list) or not raw_turns:
        raise where.error("expected a non-empty list of turns", field="turns")
    conversation_id = as_id(rest.pop(given), where, given) if given is not None else None
    metadata = rest.pop("metadata", None)
    shared = {**rest, **(metadata if isinstance(metadata, dict) else {})}
    history: list[Turn] = []
    rows: list[dict[str, Any]] = []
    for n, item in enumerate(raw_turns):
        turn = _turn(item, where, f"turns[{n}]")
        if turn is None:
            continue
        said = ("role", "type", "text", "content")
        pairs = item.items() if isinstance(item, Mapping) else ()
        fields = {k: v for k, v in pairs if k.strip().lower() not in said}
        labelled = any(k.strip().lower() in labels for k in fields)
        if labelled and turn.role != "user":
            raise where.error("an assistant turn carries labels: put them on the user turn they answer",
                              field=f"turns[{n}]")
        if labelled:
            conversation_id = conversation_id or make_id.make(turn.text)
            number = 1 + sum(t.role == "user" for t in history)
            question_id = next((v for k, v in fields.items() if k.strip().lower() == "id"), None)
            rows.append({**{k: v for k, v in fields.items() if k.strip().lower() != "id"},
                         "id": question_id if question_id is not None else f"{conversation_id}#{number}",
                         "question": turn.text, "conversation_id": conversation_id, "turn": number,
                         "history": tuple(history), "metadata": {**shared, **_metadata(fields)}})
        history.append(turn)
    if not rows:
        raise where.error("no user turn carries an id or a label (relevant_ids, reference_answer, answers): "
                          "nothing to score", field="turns")
    return rows


@dataclass
class _Seen:
    """What the questions read so far tell of one conversation."""

    turns: dict[int, tuple[int, tuple[Turn, ...]]] = field(default_factory=dict)
    """Each turn number given: (its line, its history)."""
    last: tuple[int, int] | None = None
    """The last turn number given, and its line."""
    transcript: tuple[Turn, ...] = ()
    """The longest run of turns known, oldest first: a history, then the question asked after it."""
    transcript_line: int = 0


def check_conversations(questions: Iterable[tuple[int, Question]], source: str) -> None:
    """Each conversation's turn numbers rise in file order, none repeated, and its histories agree with
    one another and with its earlier questions (a history holds every earlier turn, oldest first)."""
    seen: dict[str, _Seen] = {}
    for line, q in questions:
        if q.conversation_id is None:
            continue
        state = seen.setdefault(q.conversation_id, _Seen())
        name = f"conversation '{q.conversation_id}'"
        if q.turn is not None:
            if q.turn in state.turns:
                first, history = state.turns[q.turn]
                what = "with two different histories" if history != q.history else "twice"
                raise InputError(f"{name} has turn {q.turn} {what} (lines {first} and {line})",
                                 path=source, line=line, field="turn")
            if state.last is not None and q.turn < state.last[0]:
                raise InputError(f"{name}: turn {q.turn} comes after turn {state.last[0]} (line "
                                 f"{state.last[1]}): give a conversation's turns in order",
                                 path=source, line=line, field="turn")
            state.turns[q.turn] = (line, q.history)
            state.last = (q.turn, line)
        if q.history:
            for n, (mine, known) in enumerate(zip(q.history, state.transcript, strict=False)):
                if mine != known:
                    raise InputError(
                        f"{name}: turn {n + 1} of this history ({mine.role}: {_short(mine.text)}) differs "
                        f"from the same conversation on line {state.transcript_line} ({known.role}: "
                        f"{_short(known.text)})", path=source, line=line, field="history")
        if len(q.history) >= len(state.transcript):
            state.transcript, state.transcript_line = (*q.history, Turn("user", q.question)), line


def _turn(item: Any, where: Where, name: str) -> Turn | None:
    if isinstance(item, Turn):
        return item
    if isinstance(item, (list, tuple)) and len(item) == 2 and all(isinstance(x, str) for x in item):
        role, text = item
    elif isinstance(item, Mapping):
        lowered = {str(k).strip().lower(): v for k, v in item.items()}
        role = lowered.get("role", lowered.get("type"))
        text = _text(lowered.get("text", lowered.get("content")), where, name)
    else:
        raise where.error("expected a turn: {role, text} or [role, text]", field=name)
    if not isinstance(role, str):
        raise where.error("a turn without a role (user or assistant)", field=f"{name}.role")
    if role.strip().lower() in _INSTRUCTIONS:
        return None
    known = _ROLES.get(role.strip().lower())
    if known is None:
        raise where.error(f"role '{role}' is neither user nor assistant", field=f"{name}.role")
    if text is None or not text.strip():
        raise where.error("empty turn: give its text", field=f"{name}.text")
    if (invisible := invisible_only(text)) is not None:
        raise where.error(f"turn shows nothing ({invisible})", field=f"{name}.text")
    return Turn(known, text.strip())


def _text(value: Any, where: Where, name: str) -> str | None:
    """A turn's text: a string, or OpenAI's content parts ``[{type: text, text}]`` joined."""
    if isinstance(value, list):
        parts = [p.get("text") for p in value if isinstance(p, Mapping) and p.get("type") == "text"]
        if len(parts) != len(value) or not all(isinstance(p, str) for p in parts):
            raise where.error("only text content parts are read", field=f"{name}.content")
        return "\n".join(p for p in parts if isinstance(p, str))
    if value is None or isinstance(value, str):
        return value
    raise where.error(f"expected text, got {type(value).__name__}", field=f"{name}.text")


def _metadata(fields: Mapping[str, Any]) -> dict[str, Any]:
    value = next((v for k, v in fields.items() if k.strip().lower() == "metadata"), None)
    return value if isinstance(value, dict) else {}


def _json_cell(value: str, where: Where, name: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise where.error(f"invalid JSON array: {e.msg} (column {e.colno})", field=name) from e


def _short(text: str, size: int = 40) -> str:
    return repr(text if len(text) <= size else text[: size - 1] + "…")


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not (raw.isdecimal() and raw.isascii()):
        raise InputError(f"expected a whole number (got {raw!r})", field=name)
    return int(raw)

