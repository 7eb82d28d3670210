"""Ranking files of any system: Composer's JSON Lines layout or TREC's run format (what `--run` reads).

JSON Lines (or a JSON array): one object per question, ``{"id": question id, "results": [{"id": doc or
chunk id, "score": number, "text": optional, "doc_id": optional}, ...], "answer": optional}`` (``qid`` is
accepted for ``id``; scores may be left out, for every result of a question, by a rank-only system).
TREC: ``qid Q0 docid rank score tag`` per line, whitespace separated. Hits keep the file's order; scoring
decides the ranking (``composer.data.ranking.HitOrder``). The format is detected from the content (a leading
``{`` or ``[`` means JSON), whatever the extension (.jsonl, .json, .trec, .run, .txt...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from composer.data.fields import UniqueIds, Where, as_id, normal_id
from composer.data.readers import Records, checked, parse_json_rows, read_text
from composer.data.types import Hit, HitLists
from composer.errors import InputError

RankingFormat = Literal["jsonl", "trec"]


@dataclass(frozen=True)
class RankingFile:
    """What a ranking file holds: the hits per question and, where the system answered, its answers."""

    hits: HitLists
    answers: dict[str, str] = field(default_factory=dict)


def load_ranking_file(path: str | Path, *, fmt: RankingFormat | None = None) -> HitLists:
    """Question id -> hits; ``fmt`` overrides content detection."""
    return read_ranking_file(path, fmt=fmt).hits


def read_ranking_file(path: str | Path, *, fmt: RankingFormat | None = None) -> RankingFile:
    """The hits and the answers (a JSON file's ``answer`` fields) of a ranking file."""
    p = Path(path)
    text = read_text(p)  # a FIFO or a device is refused before it is opened
    if not text.strip():
        raise InputError("file is empty", path=p)
    if fmt is None:
        fmt = "jsonl" if text.lstrip()[0] in "{[" else "trec"
    if fmt == "jsonl":
        return _json_run(text, p)
    if fmt == "trec":
        return RankingFile(_trec_hits(text, p))
    raise InputError(f"unknown run format '{fmt}'; expected jsonl or trec", path=p)


def _json_run(text: str, path: Path) -> RankingFile:
    rows = checked(Records(str(path), parse_json_rows(text, path), tabular=False, unit="line")).rows
    hits: HitLists = {}
    answers: dict[str, str] = {}
    unique = UniqueIds("question", "line")
    for line, row in rows:
        where = Where(str(path), line, tabular=False)
        if "id" in row and "qid" in row:
            raise where.error("both 'id' and 'qid' given; keep one", field="id")
        qid = as_id(row.get("id", row.get("qid")), where)
        if qid is None:
            raise where.error("missing question id", field="id")
        unique.add(qid, where)
        results = row.get("results")
        if not isinstance(results, list):
            raise where.error("expected a list of results", field="results")
        scored = any(isinstance(item, dict) and item.get("score") is not None for item in results)
        hits[qid] = [_json_hit(item, where, f"results[{i}]", scored) for i, item in enumerate(results)]
        answer = row.get("answer")
        if answer is not None and not isinstance(answer, str):
            raise where.error(f"answer must be a string, got {type(answer).__name__}", field="answer")
        if answer is not None:
            answers[qid] = answer
    return RankingFile(hits, answers)


def _json_hit(item: Any, where: Where, name: str, scored: bool) -> Hit:
    """One result; without ``scored`` (no result of the question has a score) its score is 0, so the
    question is ranked in the order given."""
    if not isinstance(item, dict):
        raise where.error("expected an object with 'id' and 'score'", field=name)
    hit_id = as_id(item.get("id"), where, f"{name}.id")
    if hit_id is None:
        raise where.error("missing id", field=f"{name}.id")
    score = item.get("score", None) if scored else 0.0
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        hint = " (give a score for every result of a question, or for none)" if score is None else ""
        raise where.error(f"score must be a finite number, got {score!r}{hint}", field=f"{name}.score")
    text = item.get("text")
    if text is not None and not isinstance(text, str):
        raise where.error("text must be a string", field=f"{name}.text")
    return Hit(hit_id, float(score), text, as_id(item.get("doc_id"), where, f"{name}.doc_id"))


def _trec_hits(text: str, path: Path) -> HitLists:
    hits: HitLists = {}
    for number, line in enumerate(text.splitlines(), start=1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 6:
            raise InputError(
                f"expected 6 whitespace-separated fields 'qid Q0 docid rank score tag', got {len(parts)}",
                path=path,
                line=number,
            )
        qid, _, doc_id, rank, score_text, _ = parts
        qid, doc_id = normal_id(qid), normal_id(doc_id)
        try:
            int(rank)
        except ValueError:
            message = f"rank must be an integer, got '{rank}'"
            raise InputError(message, path=path, line=number, field="rank") from None
        try:
            score = float(score_text)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            message = f"score must be a finite number, got '{score_text}'"
            raise InputError(message, path=path, line=number, field="score")
        hits.setdefault(qid, []).append(Hit(doc_id, score))
    return hits
