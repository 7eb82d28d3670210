"""Text from users' files is valid Unicode before anything hashes, stores or prints it.

Strict UTF-8 decoding finds bad bytes. A lone surrogate (U+D800–U+DFFF, half of a UTF-16 pair) arrives
already decoded, from a JSON ``"\\ud800"`` or YAML ``"\\ud800"`` escape or from a DataFrame, and would only
fail when first encoded (a fingerprint, a cache key, MLflow), far from the file and line that held it.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Any

from composer.errors import InputError

_SURROGATE = re.compile("[\ud800-\udfff]")
_INVISIBLE_CATEGORIES = frozenset(("Cf", "Cc", "Zs", "Zl", "Zp"))
"""Format characters (zero-width, direction marks, BOM, soft hyphen...), controls and separators."""


def decode_utf8(data: bytes, path: str | Path, *, offset: int = 0, line: int = 1) -> str:
    """``data`` decoded as strict UTF-8, a leading BOM dropped when ``data`` starts the file; bad bytes are
    located exactly. ``data`` is the file's from byte ``offset`` on, which starts line ``line`` (a file
    read a line at a time)."""
    try:
        return data.decode("utf-8-sig" if offset == 0 else "utf-8")
    except UnicodeDecodeError as e:
        bad = data[e.start : e.end].hex(" ")
        raise InputError(
            f"not valid UTF-8: byte(s) {bad} at byte offset {offset + e.start}; save the file as UTF-8",
            path=path,
            line=line + data.count(b"\n", 0, e.start),
        ) from e


def invalid_text(text: str) -> str | None:
    """What is wrong with ``text`` (its first lone surrogate, named by code point and 1-based character
    position), None when nothing is."""
    match = _SURROGATE.search(text)
    if match is None:
        return None
    return f"invalid text (lone surrogate U+{ord(match.group()):04X} at character {match.start() + 1})"


def printable(text: str) -> str:
    """``text`` with lone surrogates written as ``\\udXXX`` escapes: safe in a message."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def first_invalid(value: Any, field: str = "") -> tuple[str, str] | None:
    """(dotted field, what is wrong) for the first invalid string in ``value``, a row of nested dicts and
    lists (keys included), or None."""
    if isinstance(value, str):
        problem = invalid_text(value)
        return None if problem is None else (field, problem)
    if isinstance(value, dict):
        for key, item in value.items():
            name = f"{field}.{printable(str(key))}" if field else printable(str(key))
            if isinstance(key, str) and (problem := invalid_text(key)) is not None:
                return name, problem.replace("invalid text", "invalid field name")
            if (found := first_invalid(item, name)) is not None:
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            if (found := first_invalid(item, f"{field}[{i}]")) is not None:
                return found
    return None


def invisible_only(text: str) -> str | None:
    """When ``text`` has characters but none that shows (only whitespace, zero-width characters, direction
    marks, a BOM or other format and control characters), what it holds, said for a user ("only invisible
    characters: U+200B ZERO WIDTH SPACE, U+200F RIGHT-TO-LEFT MARK"); None for text that shows something,
    and for empty text (the caller's "missing" case). A text that shows nothing indexes as nothing: every
    question on it scores 0. Stops at the first visible character, so a real document costs one step."""
    if not text or any(unicodedata.category(c) not in _INVISIBLE_CATEGORIES for c in text):
        return None
    marks = sorted({c for c in text if not c.isspace()})
    if not marks:
        return "only whitespace"
    named = ", ".join(f"U+{ord(c):04X} {unicodedata.name(c, 'unnamed')}" for c in marks[:3])
    more = f" and {len(marks) - 3} more" if len(marks) > 3 else ""
    return f"only invisible characters: {named}{more}"


def normal_id(text: str) -> str:
    """The form every id read is kept in: NFC (composed). ``café`` typed with a combining accent (NFD, as
    macOS names files) looks like ``café`` but would never match it: every question labelled with it would
    score 0 against a corpus that spells it composed."""
    return unicodedata.normalize("NFC", text)
