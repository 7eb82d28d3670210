"""Writing a generated set and its report: each file appears whole or not at all."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from composer.files import write_atomic


def jsonl(rows: Sequence[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def write_questions(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """The question set as JSONL (UTF-8, Arabic and Persian unescaped), written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, jsonl(rows))


def write_report(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(report, ensure_ascii=False, indent=2) + "\n")
