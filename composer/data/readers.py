"""Rows from user files and in-memory tables, each tagged with where it came from.

Every reader returns :class:`Records`: ``(number, row)`` pairs where ``number`` is what a user would look up
in the file: the physical line for JSON Lines, JSON arrays (the line an object starts on) and CSV (the line a
record starts on, so multi-line cells do not shift it), the spreadsheet row for XLSX (the header is row 1),
and the 1-based row for Parquet, DataFrames and lists of dicts. Missing values (``None``, NaN, empty CSV
cells) are dropped from the row, so loaders see one kind of "missing".
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from composer.errors import InputError
from composer.files import check_regular, open_regular
from composer.unicode import decode_utf8, first_invalid

Row = tuple[int, dict[str, Any]]

READERS_BY_EXTENSION = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "csv",
    ".xlsx": "xlsx",
    ".parquet": "parquet",
}
SUPPORTED_EXTENSIONS = tuple(READERS_BY_EXTENSION)

MAX_LINE_BYTES = 64 * 2**20
"""The longest line of a JSON Lines file, in bytes: a record is never this long, while a line without end
(a file that is a link to ``/dev/zero``, a broken export) would otherwise be read into memory whole."""

_JSON_WS = re.compile(r"[ \t\r\n]*")
_PANDAS_INDEX = re.compile(r"__index_level_\d+__")


@dataclass(frozen=True)
class Records:
    """Rows of one source.

    ``tabular`` is true for sources whose cells are flat values (CSV, XLSX, Parquet, DataFrame): there a
    string in a list field follows the cell convention of :func:`composer.data.fields.as_list`.
    ``unit`` names what the numbers count ("line" or "row"), for messages.
    """

    source: str
    rows: Iterable[Row]
    """Read once, in order; JSON Lines files are read a line at a time as they are taken."""
    tabular: bool
    unit: str


def read_source(source: Any) -> Records:
    """Rows of a path (see ``read_records``), a DataFrame or a list of dicts (see ``memory_records``)."""
    return read_records(source) if isinstance(source, (str, Path)) else memory_records(source)


def read_records(path: str | Path) -> Records:
    """Read a JSONL, JSON array, CSV/TSV, XLSX or Parquet file; raise InputError on anything unreadable,
    a FIFO or device included (refused before it is opened)."""
    p = Path(path)
    check_regular(p)
    kind = READERS_BY_EXTENSION.get(p.suffix.lower())
    if kind is None:
        raise InputError(
            f"unsupported file type '{p.suffix or '(none)'}'; supported: {', '.join(SUPPORTED_EXTENSIONS)}",
            path=p,
        )
    if kind in ("xlsx", "parquet"):
        if p.stat().st_size == 0:
            raise InputError("file is empty", path=p)
        rows = _read_xlsx(p) if kind == "xlsx" else _read_parquet(p)
        return checked(Records(str(p), rows, tabular=True, unit="row"))
    if kind in ("jsonl", "json") and _first_byte(p) != b"[":
        return checked(Records(str(p), _stream_jsonl(p), tabular=False, unit="line"))
    text = read_text(p)
    if not text.strip():
        raise InputError("file is empty", path=p)
    if kind == "csv":
        rows = _read_csv(text, p, delimiter="\t" if p.suffix.lower() == ".tsv" else None)
        return checked(Records(str(p), rows, tabular=True, unit="line"))
    return checked(Records(str(p), parse_json_rows(text, p), tabular=False, unit="line"))


def parse_json_rows(text: str, path: Path) -> list[Row]:
    """Objects of a JSON array or of JSON Lines: a .json file holding JSON Lines is common enough to accept,
    so only a leading '[' means an array."""
    return _read_json_array(text, path) if text.lstrip().startswith("[") else _read_jsonl(text, path)


def memory_records(source: Any) -> Records:
    """Rows of a pandas DataFrame or an iterable of dicts (numbered from 1, like spreadsheet rows)."""
    if _is_dataframe(source):
        items: Iterable[Any] = source.to_dict(orient="records")
        name, tabular = "<DataFrame>", True
    elif isinstance(source, Iterable) and not isinstance(source, (str, bytes, Mapping)):
        items, name, tabular = source, "<list>", False
    else:
        raise InputError(
            f"expected a file path, a pandas DataFrame or a list of dicts, got {type(source).__name__}"
        )
    rows: list[Row] = []
    for number, item in enumerate(items, start=1):
        if not isinstance(item, Mapping):
            raise InputError(f"expected a dict, got {type(item).__name__}", path=name, line=number)
        rows.append((number, clean_row(item)))
    return checked(Records(name, rows, tabular=tabular, unit="row"))


def read_text(path: Path) -> str:
    """The file decoded as strict UTF-8 (a leading BOM is dropped); bad bytes are located exactly."""
    try:
        with open_regular(path) as f:
            data = f.read()
    except OSError as e:
        raise InputError(f"cannot read file: {e.strerror or e}", path=path) from e
    return decode_utf8(data, path)


def clean_row(row: Mapping[Any, Any]) -> dict[str, Any]:
    """String keys, plain Python values, and no missing values (None / NaN / NaT)."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        plain = _plain(value)
        if plain is None or (isinstance(key, str) and _PANDAS_INDEX.fullmatch(key)):
            continue
        out[str(key)] = plain
    return out


def _plain(value: Any) -> Any:
    """numpy scalars and arrays become Python values; NaN-like values become None."""
    if hasattr(value, "tolist") and type(value).__module__ == "numpy":
        value = value.tolist()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if type(value).__name__ in ("NAType", "NaTType"):
        return None
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def checked(records: Records) -> Records:
    """``records`` whose rows, as they are read, must hold valid text only (see ``composer.unicode``) and
    be at least one: an InputError locates what is wrong."""
    return Records(records.source, _checked_rows(records), records.tabular, records.unit)


def _checked_rows(records: Records) -> Iterator[Row]:
    empty = True
    for number, row in records.rows:
        if (found := first_invalid(row)) is not None:
            field, problem = found
            raise InputError(problem, path=records.source, line=number, field=field)
        empty = False
        yield number, row
    if empty:
        raise InputError("no records found", path=records.source)


def _first_byte(path: Path) -> bytes:
    """The file's first byte that is neither JSON whitespace nor a BOM (empty for a blank file): ``[``
    starts a JSON array, anything else JSON Lines."""
    with open_regular(path) as f:
        head = f.read(65536).removeprefix(b"\xef\xbb\xbf")
        while head:
            found = head.lstrip(b" \t\r\n")
            if found:
                return found[:1]
            head = f.read(65536)
    return b""


def _stream_jsonl(path: Path) -> Iterator[Row]:
    """A JSON Lines file's rows read a line at a time, as they are taken: a corpus of 10^6 documents is
    never held as one text, nor as rows (read whole, 100,000 ARCD-like documents peaked at 2.7x the memory
    they then took, and their process kept most of it)."""
    with open_regular(path) as f:
        empty = True
        for row in _jsonl_rows(_decoded_lines(f, path), path, lambda: read_text(path)):
            empty = False
            yield row
    if empty:  # every line blank: any other line gave a row or an error
        raise InputError("file is empty", path=path)


def _decoded_lines(f: IO[bytes], path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a file, each line decoded as strict UTF-8 and located if it is not, and no
    longer than ``MAX_LINE_BYTES`` (a longer one is refused before more of it is read)."""
    offset = 0
    limit = MAX_LINE_BYTES
    for number, data in enumerate(iter(lambda: f.readline(limit + 1), b""), start=1):
        if len(data) > limit and not data.endswith(b"\n"):  # limit + 1 bytes, none of them a newline
            raise InputError(
                f"line longer than {_size(limit)}: not a JSON Lines record (is this the right file?)",
                path=path,
                line=number,
            )
        yield number, decode_utf8(data, path, offset=offset, line=number)
        offset += len(data)


def _size(n: int) -> str:
    """``n`` bytes as a person reads them: 64 MiB, 512 KiB, 100 bytes."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"


def _read_jsonl(text: str, path: Path) -> list[Row]:
    """Lines end at "\n" only (a "\r" before it is JSON whitespace): ``str.splitlines`` would also cut at
    U+2028, U+0085 and others, which ``json.dumps(..., ensure_ascii=False)`` leaves raw inside strings."""
    return list(_jsonl_rows(enumerate(text.split("\n"), start=1), path, lambda: text))


def _jsonl_rows(lines: Iterable[tuple[int, str]], path: Path, whole: Callable[[], str]) -> Iterator[Row]:
    """The rows of numbered JSON Lines, blank lines skipped; ``whole()`` gives the file's text when its
    first line fails (a pretty-printed object is named as such)."""
    first = True
    for number, line in lines:
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            if first:
                _reject_single_document(whole(), path)
            raise InputError(f"invalid JSON: {e.msg} (column {e.colno})", path=path, line=number) from e
        first = False
        yield number, _object(value, path, number)


def _reject_single_document(text: str, path: Path) -> None:
    """A pretty-printed JSON object fails on line 1 as JSON Lines; say what is wrong instead."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return
    raise InputError(
        f"expected JSON Lines (one object per line) or a JSON array of objects, "
        f"got {_json_type(value)} spread over several lines",
        path=path,
        line=1,
    )


def _read_json_array(text: str, path: Path) -> list[Row]:
    """Decode the array element by element, so each object keeps the line it starts on."""
    decoder = json.JSONDecoder()
    rows: list[Row] = []
    pos = _skip_ws(text, text.index("[") + 1)
    if text.startswith("]", pos):
        return _expect_end(text, pos + 1, path, rows)
    line, counted = 1, 0  # line number at offset `counted`, advanced incrementally
    while True:
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise InputError(f"invalid JSON: {e.msg} (column {e.colno})", path=path, line=e.lineno) from e
        line, counted = line + text.count("\n", counted, pos), pos
        rows.append((line, _object(value, path, line)))
        pos = _skip_ws(text, end)
        if text.startswith(",", pos):
            pos = _skip_ws(text, pos + 1)
        elif text.startswith("]", pos):
            return _expect_end(text, pos + 1, path, rows)
        else:
            where = line + text.count("\n", counted, pos)
            message = "invalid JSON: expected ',' or ']' after an array element"
            raise InputError(message, path=path, line=where)


def _skip_ws(text: str, pos: int) -> int:
    match = _JSON_WS.match(text, pos)
    return match.end() if match else pos


def _expect_end(text: str, pos: int, path: Path, rows: list[Row]) -> list[Row]:
    extra = _skip_ws(text, pos)
    if extra < len(text):
        line = text.count("\n", 0, extra) + 1
        raise InputError("invalid JSON: extra data after the array", path=path, line=line)
    return rows


def _object(value: Any, path: Path, line: int) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"expected a JSON object, got {_json_type(value)}", path=path, line=line)
    return clean_row(value)


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def _read_csv(text: str, path: Path, delimiter: str | None) -> list[Row]:
    """Python's csv module (not pandas) so records keep their line numbers and cells stay strings."""
    end = text.find("\n")
    header_line = text if end < 0 else text[:end]
    # The header holds plain column names, so the most frequent candidate there is the delimiter.
    sep = delimiter or max((",", ";", "\t"), key=header_line.count)
    # Whole documents can sit in one cell: lift the csv module's 128 KiB default cap on a field.
    csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=sep)
    header = _header(next(reader), path, 1)
    rows: list[Row] = []
    start = reader.line_num + 1
    try:
        for cells in reader:
            if any(c.strip() for c in cells):
                rows.append((start, _csv_row(header, cells, path, start)))
            start = reader.line_num + 1
    except csv.Error as e:
        raise InputError(f"invalid CSV: {e}", path=path, line=start) from e
    return rows


def _csv_row(header: list[str | None], cells: list[str], path: Path, line: int) -> dict[str, Any]:
    if len(cells) > len(header):
        raise InputError(f"{len(cells)} cells but the header has {len(header)} columns", path=path, line=line)
    named = zip(header, cells, strict=False)  # short rows: the trailing cells are missing
    return {name: cell for name, cell in named if name is not None and cell.strip()}


def _header(cells: Iterable[Any], path: Path, line: int) -> list[str | None]:
    """Column names; blank header cells become None (their column is ignored)."""
    names = [str(c).strip() if c is not None and str(c).strip() else None for c in cells]
    seen: set[str] = set()
    for name in names:
        if name is not None and name in seen:
            raise InputError(f"duplicate column '{name}' in the header", path=path, line=line)
        if name is not None:
            seen.add(name)
    if not seen:
        raise InputError("the header row has no column names", path=path, line=line)
    return names


def _read_xlsx(path: Path) -> list[Row]:
    """First worksheet; the first row is the header, numbers are the spreadsheet's own row numbers."""
    import openpyxl

    try:
        book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except Exception as e:  # openpyxl raises zipfile, KeyError and XML errors for damaged files
        raise InputError(f"cannot read XLSX: {e}", path=path) from e
    try:
        sheet_rows: Iterator[tuple[Any, ...]] = book.worksheets[0].iter_rows(values_only=True)
        header: list[str | None] | None = None
        rows: list[Row] = []
        for number, cells in enumerate(sheet_rows, start=1):
            if header is None:
                if any(_xlsx_cell(c) is not None for c in cells):  # blank rows above the header are skipped
                    header = _header(cells, path, number)
                continue
            named = zip(header, cells, strict=False)
            row = clean_row({name: _xlsx_cell(v) for name, v in named if name is not None})
            if row:
                rows.append((number, row))
        if header is None:
            raise InputError("file is empty", path=path)
        return rows
    finally:
        book.close()


def _xlsx_cell(value: Any) -> Any:
    if isinstance(value, str) and not value.strip():
        return None
    return value


def _read_parquet(path: Path) -> list[Row]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"cannot read Parquet: {e}", path=path) from e
    return [(number, clean_row(row)) for number, row in enumerate(table.to_pylist(), start=1)]


def _is_dataframe(value: Any) -> bool:
    return type(value).__name__ == "DataFrame" and hasattr(value, "to_dict")
