"""Turning raw row values into typed fields, with aliases, generated ids and located errors.

List cells in tables (CSV, XLSX, Parquet, DataFrame) follow one convention: a string starting with ``[``
is a JSON array (``["d1", "d2"]``); any other string is one value, except in id lists
(``relevant_ids``), which split on ``|`` or ``;`` (``d1|d2``). Free text (answers, contexts) is never
split, because it legitimately contains those characters: give several texts as a JSON array. In JSON
sources and lists of dicts a scalar where a list is expected is a one-element list.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from composer.data.readers import Records
from composer.errors import InputError
from composer.unicode import normal_id

_ID_SEPARATORS = re.compile(r"[|;]")


@dataclass(frozen=True)
class Where:
    """The location of one row, for error messages."""

    source: str
    line: int
    tabular: bool

    def error(self, message: str, field: str | None = None) -> InputError:
        return InputError(message, path=self.source, line=self.line, field=field)


def split_fields(
    row: Mapping[str, Any], aliases: Mapping[str, str], where: Where
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(known fields under canonical names, everything else).

    Names match case-insensitively; ``aliases`` maps lower-case names (canonical ones included) to canonical
    names. Two names for one field in a row is an error rather than a silent pick.
    """
    known: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    extra: dict[str, Any] = {}
    for key, value in row.items():
        name = aliases.get(key.strip().lower())
        if name is None:
            extra[key] = value
        elif name in known:
            raise where.error(f"both '{given_as[name]}' and '{key}' given; keep one", field=name)
        else:
            known[name], given_as[name] = value, key
    return known, extra


def as_id(value: Any, where: Where, field: str = "id") -> str | None:
    """An id as a string: 12 and 12.0 (spreadsheets) both become "12"; blank is missing; NFC (see
    ``normal_id``)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise where.error(f"expected an id (text or number), got {_kind(value)}", field=field)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = normal_id(str(value).strip())
    return text or None


def as_text(value: Any, where: Where, field: str) -> str | None:
    """A single text; a one-element list is accepted (some tools store every field as a list)."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if value is None:
        return None
    if isinstance(value, (list, dict)):
        raise where.error(f"expected one text, got {_kind(value)}", field=field)
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # a year in a pandas column that also has blanks: 1958.0 -> "1958"
    return str(value)


def as_list(value: Any, where: Where, field: str, *, ids: bool) -> tuple[str, ...]:
    """A list field as a tuple of non-empty strings (see the module docstring for the cell convention)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return ()
    if isinstance(value, str) and where.tabular:
        stripped = value.strip()
        if stripped.startswith("["):
            try:
                value = json.loads(stripped)
            except json.JSONDecodeError as e:
                raise where.error(f"invalid JSON array: {e.msg} (column {e.colno})", field=field) from e
        elif ids:
            value = [part for part in _ID_SEPARATORS.split(stripped) if part.strip()]  # `d1; d3 ;` is fine
    if isinstance(value, dict) and isinstance(value.get("text"), list):
        value = value["text"]  # SQuAD / Hugging Face layout: {"text": [...], "answer_start": [...]}
    if not isinstance(value, (list, tuple)):
        value = [value]
    items: list[str] = []
    for n, item in enumerate(value, 1):
        text = as_id(item, where, field) if ids else as_text(item, where, field)
        if text is not None and text.strip():
            items.append(text)
        elif ids:  # a blank id in a list (`["d1", ""]`) is a slip: dropping it would hide it
            raise where.error(f"id {n} of {len(value)} is blank: remove it or give the id", field=field)
    return tuple(items)


def as_metadata(value: Any, where: Where) -> dict[str, Any]:
    """A metadata object; tables may hold it as a JSON string."""
    if value is None:
        return {}
    if isinstance(value, str) and where.tabular:
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise where.error(f"invalid JSON object: {e.msg} (column {e.colno})", field="metadata") from e
    if not isinstance(value, dict):
        raise where.error(f"expected an object, got {_kind(value)}", field="metadata")
    return value


@dataclass
class IdMaker:
    """Deterministic ids for rows without one: ``<prefix>-`` + the first 12 hex digits of SHA-1 of the text.

    The n-th repeat of the same text gets ``-n`` appended (n >= 2), so ids do not depend on the position of
    other rows: adding or reordering rows never renames the others.
    """

    prefix: str
    _seen: dict[str, int] = field(default_factory=dict)

    def make(self, text: str) -> str:
        base = f"{self.prefix}-{hashlib.sha1(text.encode('utf-8')).hexdigest()[:12]}"
        count = self._seen.get(base, 0) + 1
        self._seen[base] = count
        return base if count == 1 else f"{base}-{count}"


@dataclass
class UniqueIds:
    """Rejects a second row with an id already seen, naming both places."""

    kind: str
    unit: str
    _lines: dict[str, int] = field(default_factory=dict)

    def add(self, item_id: str, where: Where) -> None:
        first = self._lines.get(item_id)
        if first is None:
            self._lines[item_id] = where.line
            return
        places = f"{self.unit}s {first} and {where.line}"
        if first == where.line:  # objects of a one-line JSON array share their line
            places = f"twice on {self.unit} {first}"
        raise where.error(f"duplicate {self.kind} id '{item_id}' ({places})", field="id")


class _Identified(Protocol):
    @property
    def id(self) -> str: ...


Item = TypeVar("Item", bound=_Identified)


def parse_rows(
    records: Records, kind: str, id_prefix: str, parse: Callable[[dict[str, Any], Where, IdMaker], Item]
) -> list[tuple[int, Item]]:
    """(line, item) per row: ``parse`` makes the item (ids it lacks come from ``IdMaker(id_prefix)``), and a
    second item with an id already seen is rejected, naming both lines."""
    return parse_row_items(records, kind, id_prefix, lambda row, where, make_id: [parse(row, where, make_id)])


def parse_row_items(
    records: Records, kind: str, id_prefix: str, parse: Callable[[dict[str, Any], Where, IdMaker], list[Item]]
) -> list[tuple[int, Item]]:
    """``parse_rows`` where one row may hold several items (a conversation holds several questions)."""
    unique = UniqueIds(kind, records.unit)
    make_id = IdMaker(id_prefix)
    items: list[tuple[int, Item]] = []
    for line, row in records.rows:
        where = Where(records.source, line, records.tabular)
        for item in parse(row, where, make_id):
            unique.add(item.id, where)
            items.append((line, item))
    return items


def _kind(value: Any) -> str:
    return {list: "a list", tuple: "a list", dict: "an object", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )
