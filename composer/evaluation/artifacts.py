"""A report's files as text: summary.json, samples.csv, traces.jsonl and error_rates.json, and the question
table (questions.json) that a study's trial runs add for MLflow's UI.

A study writes these for every trial, 1,395 rows each on ARCD (484 trials in AutoRAG's space), so each
cell is encoded once per report (``Cells``) for the three per-question files that show it, and what
repeats from one trial to the next (question ids and texts, gold answers, chunk ids) once per study
(``Memo``). Strings go through the C encoder ``json.dumps`` itself calls (``dumps`` with options builds a
new encoder per call), floats as Python, JSON and the csv module write them (their repr), each distinct
value once.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from json.encoder import encode_basestring as _json_str
from typing import Any

import numpy as np

from composer.data.ranking import NONE, Ranking
from composer.data.types import Hit
from composer.evaluation.table import Column, SampleTable, optional_values, strict_json

QUESTION_TABLE = "questions.json"
_MEMO_TUPLES = 8
"""String tuples a Memo keeps encoded: a study's question ids and texts (a few, for its batches)."""
_NOT_FINITE = frozenset({"NaN", "Infinity", "-Infinity"})
_NEEDS_QUOTES = re.compile(r'[,"\r\n]')


@dataclass
class Memo:
    """Encodings that repeat across the reports of one study: tuples of strings (question ids and texts),
    each chunk table's items, and each question's gold. One per MLflow writer; a lone report needs none."""

    tuples: OrderedDict[tuple[str, ...], list[str]] = field(default_factory=OrderedDict)
    items: dict[str, dict[int, tuple[str, str]]] = field(default_factory=dict)
    """Per chunk table key (an index's: a study's trials retrieve from a few), table position -> its
    item's encoded id and document id, for the positions retrieved so far."""
    gold: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Question id -> its expected ids and expected response as question-table cells."""

    def strings(self, values: tuple[str, ...]) -> list[str]:
        found = self.tuples.get(values)
        if found is None:
            found = self.tuples[values] = json_strings(values)
            if len(self.tuples) > _MEMO_TUPLES:
                self.tuples.popitem(last=False)
        return found


class Cells:
    """One table's per-question cells as JSON text, each encoded once for every file that shows it."""

    def __init__(self, table: SampleTable, memo: Memo) -> None:
        self.table = table
        self.memo = memo
        self.n = len(table)
        self._unkeyed: dict[int, tuple[str, str]] = {}  # a table made up on the spot: no key to keep it by

    @cached_property
    def ids(self) -> list[str]:
        return self.memo.strings(tuple(self.table.question_ids))

    @cached_property
    def questions(self) -> list[str]:
        return self.memo.strings(tuple(self.table.questions))

    @cached_property
    def answers(self) -> list[str]:
        answers = self.table.answers
        return json_strings(answers) if answers is not None else ["null"] * self.n

    @cached_property
    def metrics(self) -> dict[str, list[str | None]]:
        """Each metric column's values as text, None where not finite: the columns hold a few distinct
        values (0, 1, 1/2...), so all of them are written in one pass over the distinct ones."""
        return float_columns(self.table.metrics)

    @cached_property
    def latency(self) -> dict[str, list[str | None]]:
        return {stage: float_texts(column) for stage, column in self.table.latency.items()}

    def metric_json(self, name: str) -> list[str]:
        return [v if v is not None else "null" for v in self.metrics[name]]

    @cached_property
    def retrieved_ids(self) -> list[str]:
        """Each question's retrieved ids as a JSON list."""
        retrieved = self.table.retrieved
        if retrieved is None:
            return ["[]"] * self.n
        if not isinstance(retrieved, Ranking):
            return [strict_json([h.id for h in hits], indent=None) for hits in retrieved]
        items = self._items(retrieved)
        return ["[" + ", ".join([items[i][0] for i in row if i != NONE]) + "]"
                for row in retrieved.items.tolist()]

    def retrieved(self, *, texts: bool) -> list[str]:
        """Each question's hits as a JSON list of ``{"id", "score", "doc_id"[, "text"]}``."""
        retrieved = self.table.retrieved
        if retrieved is None:
            return ["[]"] * self.n
        if not isinstance(retrieved, Ranking):
            return [strict_json([_hit_dict(h, texts) for h in hits], indent=None) for hits in retrieved]
        found = self._items(retrieved)
        heads = {i: f'{{"id": {found[i][0]}, "score": ' for i in found}
        if texts:
            table = retrieved.table
            tails = {i: f', "doc_id": {doc}, "text": {json_string(table.texts[i] or None)}}}'
                     for i, (_, doc) in found.items()}
        else:
            tails = {i: f', "doc_id": {doc}}}' for i, (_, doc) in found.items()}
        scores = float_texts(retrieved.scores.ravel(), distinct=False)
        width = retrieved.items.shape[1]
        out = []
        for r, row in enumerate(retrieved.items.tolist()):
            row_scores = scores[r * width : (r + 1) * width]
            out.append("[" + ", ".join([heads[i] + (s or "null") + tails[i]
                                        for i, s in zip(row, row_scores, strict=True) if i != NONE]) + "]")
        return out

    def _items(self, ranking: Ranking) -> dict[int, tuple[str, str]]:
        """The encoded id and document id of every item this ranking retrieved (kept per table in the
        memo: a study's trials retrieve from the same few tables; a 100k-chunk table is not encoded
        whole)."""
        table = ranking.table
        known = self.memo.items.setdefault(table.key, {}) if table.key else self._unkeyed
        new = [i for i in np.unique(ranking.items).tolist() if i != NONE and i not in known]
        if new:
            ids = json_strings([table.ids[i] for i in new])
            docs = json_strings([table.doc_ids[i] for i in new])
            known.update(zip(new, zip(ids, docs, strict=True), strict=True))
        return known


def sample_columns(
    t: SampleTable, retrieved_ids: Sequence[str], numbers: Mapping[str, Sequence[Any]] | None = None
) -> dict[str, Sequence[Any]]:
    """The columns of ``to_dataframe`` (and samples.csv), metrics and latencies as numbers (None where
    missing); ``retrieved_ids`` is each question's retrieved ids as a JSON list. ``numbers``: the metric
    and latency columns by name, already made (samples.csv's text), instead of converted here."""
    n = len(t)
    tokens = optional_values(t.context_tokens) if t.context_tokens is not None else [None] * n
    columns: dict[str, Sequence[Any]] = {
        "question_id": t.question_ids,
        "question": t.questions,
        "retrieved_ids": retrieved_ids,
        "answer": t.answers if t.answers is not None else [None] * n,
        "context_tokens": [None if v is None else int(v) for v in tokens],
    }
    for name, col in t.metrics.items():
        columns[name] = optional_values(col) if numbers is None else numbers[name]
    for stage, col in t.latency.items():
        if not np.isnan(col).all():
            name = f"latency_{stage}_s"
            columns[name] = optional_values(col) if numbers is None else numbers[name]
    columns.update({f"skipped_{group}": reasons for group, reasons in t.skipped.items()})
    columns["error"] = [None if (e := t.errors.get(i)) is None else str(e) for i in range(n)]
    return columns


def samples_csv(cells: Cells) -> str:
    """samples.csv: ``EvaluationReport.to_dataframe``'s columns with minimal quoting, an empty cell where
    a value is missing. Each column is made text on its own, the numbers from the cells the other files
    use, and the rows joined: the csv module's ``writerows`` took 21 ms of a trial's 54 on ARCD, pandas'
    ``to_csv`` 2.5x that."""
    t = cells.table
    numbers = {name: [v or "" for v in cells.metrics[name]] for name in t.metrics}
    numbers.update({f"latency_{stage}_s": [v or "" for v in cells.latency[stage]] for stage in t.latency})
    given = set(numbers)
    columns = {
        name: column if name in given else csv_cells(column)
        for name, column in sample_columns(t, cells.retrieved_ids, numbers).items()
    }
    header = ",".join(csv_cells(list(columns))) + "\n"
    return header + "".join([",".join(row) + "\n" for row in zip(*columns.values(), strict=True)])


def csv_cells(values: Iterable[Any]) -> list[str]:
    """Each value as a csv cell with minimal quoting: a field holding a comma, a quote or a line break
    (``\\n`` or ``\\r``) is quoted, its quotes doubled; None is empty, a float its repr."""
    out = []
    for v in values:
        if v is None:
            out.append("")
        elif isinstance(v, str):
            out.append('"' + v.replace('"', '""') + '"' if _NEEDS_QUOTES.search(v) else v)
        else:
            out.append(repr(v) if isinstance(v, float) else str(v))
    return out


def trace_lines(cells: Cells, *, texts: bool = True) -> list[str]:
    """traces.jsonl, one JSON line per question; ``texts=False`` leaves the retrieved texts out."""
    t = cells.table
    metrics = _json_objects({name: cells.metric_json(name) for name in t.metrics}, cells.n, keep_null=True)
    latency = _json_objects(cells.latency, cells.n, keep_null=False)
    tokens = optional_values(t.context_tokens) if t.context_tokens is not None else None
    retrieved = cells.retrieved(texts=texts)
    ids, questions, answers = cells.ids, cells.questions, cells.answers
    groups = [(_json_str(g) + ": ", reasons) for g, reasons in t.skipped.items()]
    said: dict[str, str] = {}  # skip reasons are a few strings, each encoded once
    lines = []
    for i in range(cells.n):
        skipped = ", ".join(
            key + (said.get(r) or said.setdefault(r, _json_str(r)))
            for key, reasons in groups
            if (r := reasons[i]) is not None
        )
        error = "null" if (e := t.errors.get(i)) is None else strict_json(vars(e), indent=None)
        count = None if tokens is None else tokens[i]
        lines.append(
            f'{{"question_id": {ids[i]}, "question": {questions[i]}, "retrieved": {retrieved[i]}, '
            f'"answer": {answers[i]}, "metrics": {metrics[i]}, "latency": {latency[i]}, '
            f'"skipped": {{{skipped}}}, "error": {error}, '
            f'"context_tokens": {"null" if count is None else int(count)}, '
            f'"reasons": {strict_json(why, indent=None) if (why := t.reasons.get(i)) else "{}"}}}\n'
        )
    return lines


def question_table(cells: Cells, expectations: Mapping[str, Mapping[str, Any]]) -> str:
    """The per-question table (question, gold, retrieved ids, answer, metrics, error) as JSON, worst first
    by the mean of its metrics, in the layout of MLflow's table artifacts (``{"columns", "data"}``,
    pandas' ``orient="split"``), which its UI shows as a table."""
    t, n = cells.table, cells.n
    names = [name for name, column in t.metrics.items() if not np.isnan(column).all()]
    matrix = np.column_stack([t.metrics[name] for name in names]) if names else np.empty((n, 0))
    scored = (~np.isnan(matrix)).sum(axis=1)
    means = np.where(scored > 0, np.nansum(matrix, axis=1) / np.maximum(scored, 1), np.inf)
    columns = [cells.metric_json(name) for name in names]
    values = [", " + ", ".join(row) for row in zip(*columns, strict=True)] if names else [""] * n
    gold = _gold_cells(expectations, t.question_ids, cells.memo)
    ids, questions, answers, retrieved = cells.ids, cells.questions, cells.answers, cells.retrieved_ids
    rows = []
    for row in np.argsort(means, kind="stable").tolist():
        expected_ids, expected_response = gold[row]
        error = t.errors.get(row)
        rows.append(
            f"[{ids[row]}, {questions[row]}, {expected_ids}, {retrieved[row]}, {answers[row]}, "
            f"{expected_response}{values[row]}, {json_string(None if error is None else str(error))}]"
        )
    header = [
        "question_id", "question", "expected_ids", "retrieved_ids", "answer", "expected_response",
        *names, "error",
    ]
    return f'{{"columns": {json.dumps(header, ensure_ascii=False)}, "data": [{", ".join(rows)}]}}'


def _gold_cells(
    expectations: Mapping[str, Mapping[str, Any]], question_ids: Sequence[str], memo: Memo
) -> list[tuple[str, str]]:
    """Each question's expected ids and expected response as cells; a memo is for one study, whose
    expectations do not change (a lone report's memo is new)."""
    out = []
    for qid in question_ids:
        found = memo.gold.get(qid)
        if found is None:
            gold = expectations.get(qid, {})
            found = memo.gold[qid] = (
                "[" + ", ".join(json_strings(list(gold.get("expected_ids", ())))) + "]",
                json_string(gold.get("expected_response")),
            )
        out.append(found)
    return out


def json_strings(values: Iterable[str | None]) -> list[str]:
    """Each string as ``json.dumps(v, ensure_ascii=False)`` writes it, ``null`` for None."""
    return ["null" if v is None else _json_str(v) for v in values]


def json_string(value: str | None) -> str:
    return "null" if value is None else _json_str(value)


def float_texts(column: Column, *, distinct: bool = True) -> list[str | None]:
    """Each value as Python, JSON and the csv module write a float (its repr), None where not finite.
    ``distinct``: the column repeats values, and each distinct one (by its bits) is written once."""
    if not len(column):
        return []
    values = np.ascontiguousarray(column, dtype=np.float64)
    if not distinct:
        return _texts(values)
    unique, where = np.unique(values.view(np.int64), return_inverse=True)
    text = _texts(unique.view(np.float64))
    return [text[i] for i in where.ravel().tolist()]


def float_columns(columns: Mapping[str, Column]) -> dict[str, list[str | None]]:
    """``float_texts`` of every column, the distinct values of all of them written in one pass."""
    if not columns:
        return {}
    names = list(columns)
    matrix = np.column_stack([np.asarray(columns[name], dtype=np.float64) for name in names])
    texts = float_texts(matrix.ravel())
    width = len(names)
    return {name: texts[j::width] for j, name in enumerate(names)}


def _texts(values: np.ndarray) -> list[str | None]:
    written = json.dumps(values.tolist())[1:-1].split(", ")
    return [None if v in _NOT_FINITE else v for v in written]


def _json_objects(columns: Mapping[str, Sequence[str | None]], n: int, *, keep_null: bool) -> list[str]:
    """Row i of ``columns`` as a JSON object ``{"name": value, ...}``: None (or ``null``) kept as
    ``null`` with ``keep_null``, else the key is left out of that row."""
    if not columns:
        return ["{}"] * n
    keys = [_json_str(name) + ": " for name in columns]
    rows = zip(*columns.values(), strict=True)
    if keep_null:  # every key in every row: one %-format per row
        template = "{" + ", ".join(key.replace("%", "%%") + "%s" for key in keys) + "}"
        return [template % row for row in rows]
    return ["{" + ", ".join([k + v for k, v in zip(keys, row, strict=True) if v is not None]) + "}"
            for row in rows]


def _hit_dict(hit: Hit, texts: bool) -> dict[str, Any]:
    return {"id": hit.id, "score": hit.score, "doc_id": hit.doc_id, **({"text": hit.text} if texts else {})}
