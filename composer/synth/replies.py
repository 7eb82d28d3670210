"""Reading the model's replies to the synth prompts; anything unusable raises ParseError (a ValueError),
which the LLM client retries and, after its last retry, counts as a ``bad_response`` failure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from composer.llm.parse import ParseError, as_verdict, extract_json
from composer.metrics.refusal import is_refusal


def _object(reply: str) -> Mapping[str, Any]:
    data = extract_json(reply)
    if isinstance(data, list) and len(data) == 1:  # [{"question": ...}]
        data = data[0]
    if not isinstance(data, Mapping):
        raise ParseError("expected a JSON object")
    return {str(k).strip().lower(): v for k, v in data.items()}


def _text(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, list) and len(value) == 1:  # {"answer": ["1908"]}
        value = value[0]
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise ParseError(f"{key!r} is not a text")
    text = " ".join(str(value).split())
    return text or None


def parse_generated(reply: str, *, with_answer: bool) -> tuple[str, str | None]:
    """(question, answer) from {"question": ..., "answer": ...}; the answer is required when asked for."""
    data = _object(reply)
    question = _text(data, "question")
    if question is None:
        raise ParseError("no question in reply")
    answer = _text(data, "answer") if with_answer else None
    if with_answer and answer is None:
        raise ParseError("no answer in reply")
    return question, answer


def parse_conversation(reply: str, follow_ups: int) -> list[tuple[str, str, str | None]]:
    """(question, answer, standalone) of each user turn from {"turns": [...]}, at most ``1 + follow_ups``:
    a first question and at least one follow-up, each with its answer, every follow-up with its rewrite."""
    data = _object(reply)
    turns = data.get("turns")
    if not isinstance(turns, list) or len(turns) < 2:
        raise ParseError("expected 'turns': a first question and at least one follow-up")
    out: list[tuple[str, str, str | None]] = []
    for i, item in enumerate(turns[: 1 + follow_ups]):
        if not isinstance(item, Mapping):
            raise ParseError(f"turn {i + 1} is not an object")
        turn = {str(k).strip().lower(): v for k, v in item.items()}
        question, answer = _text(turn, "question"), _text(turn, "answer")
        standalone = _text(turn, "standalone")
        if question is None or answer is None:
            raise ParseError(f"turn {i + 1} has no question or no answer")
        if i and standalone is None:
            raise ParseError(f"follow-up {i} has no standalone rewrite")
        out.append((question, answer, standalone if i else None))
    return out


def parse_check(reply: str, key: str) -> bool:
    """The 1/0 verdict under ``key`` ("supported", "answerable"), or a bare verdict."""
    data = extract_json(reply)
    if isinstance(data, Mapping):
        lowered = {str(k).strip().lower(): v for k, v in data.items()}
        if key not in lowered:
            raise ParseError(f"no {key!r} in reply")
        return bool(as_verdict(lowered[key]))
    return bool(as_verdict(data))


def parse_closed_book(reply: str) -> str | None:
    """The model's answer without the passage; None when it says it cannot know (null or a refusal)."""
    data = _object(reply)
    if "answer" not in data:
        raise ParseError("no answer in reply")
    answer = _text(data, "answer")
    if answer is None or is_refusal(answer) or answer.lower() in {"null", "none", "unknown"}:
        return None
    return answer
