"""The LLM reply cache: one SQLite file shared by every process of a study, or a table in a PostgreSQL
database shared by every machine of a cluster (``caches:``), so no call is paid twice."""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from composer.rdb_store import PostgresStore
from composer.store import SqliteStore

_SCHEMA = """
CREATE TABLE IF NOT EXISTS {replies} (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    text TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cost {real},
    created {real} NOT NULL
)
"""
SHARED_TABLE = "composer_llm_replies"
"""The replies' table in a ``caches:`` database."""


@dataclass(frozen=True)
class CachedReply:
    text: str
    prompt_tokens: int
    completion_tokens: int
    cost: float | None


class DamagedRow(ValueError):
    """A cached row that no live reply could have produced: dropped, so the call asks again."""


def cache_key(
    model: str, api_base: str | None, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]
) -> str:
    """Content hash of what determines a reply: model, endpoint, messages and sampling parameters.

    The endpoint is part of it because one model name on two self-hosted servers may be two models; the
    key and the timeout are not, as they do not change the reply.
    """
    payload = json.dumps(
        {"model": model, "api_base": api_base, "messages": list(messages), "params": dict(params)},
        ensure_ascii=False,
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class LLMCache:
    """Replies by cache key in one SQLite file, or with ``caches`` (a PostgreSQL URL) in its table
    ``composer_llm_replies``; shared by processes and threads (``SqliteStore``, ``PostgresStore``)."""

    def __init__(self, path: str | Path, *, caches: str | None = None) -> None:
        self.path = Path(path)
        self._store: SqliteStore | PostgresStore
        if caches is None:
            self._table = "replies"
            self._store = SqliteStore(self.path, (_SCHEMA.format(replies="replies", real="REAL"),),
                                      busy_timeout_s=60.0)
            # the text as bytes: sqlite3 would raise on invalid UTF-8 itself
            self._raw_text = "CAST(text AS BLOB)"
            self.where = str(self.path)
        else:
            self._table = SHARED_TABLE
            schema = _SCHEMA.format(replies=SHARED_TABLE, real="DOUBLE PRECISION")
            self._store = PostgresStore(caches, (schema,))
            self._raw_text = "convert_to(text, 'UTF8')"  # PostgreSQL's text is valid UTF-8 by construction
            self.where = f"{self._store.where} ({SHARED_TABLE})"
        """What warnings name: the file, or the scrubbed URL and table."""

    def get(self, key: str) -> CachedReply | None:
        """The reply stored under ``key``, None if there is none; a damaged row (empty or non-UTF-8 text,
        token counts that are not integers, a cost that is not a number) is deleted and raises DamagedRow.
        """
        rows = self._store.query(
            f"SELECT {self._raw_text}, prompt_tokens, completion_tokens, cost FROM {self._table} "
            "WHERE key = ?",
            (key,),
        )
        if not rows:
            return None
        try:
            return _checked(*rows[0])
        except DamagedRow:
            self.drop(key)
            raise

    def drop(self, key: str) -> None:
        self._store.execute(f"DELETE FROM {self._table} WHERE key = ?", (key,))

    def put(self, key: str, model: str, reply: CachedReply) -> None:
        """Store ``reply`` under ``key``, replacing an earlier one (a row dropped and asked again)."""
        self._store.execute(
            f"INSERT INTO {self._table} VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET "
            "model = excluded.model, text = excluded.text, prompt_tokens = excluded.prompt_tokens, "
            "completion_tokens = excluded.completion_tokens, cost = excluded.cost, "
            "created = excluded.created",
            (key, model, reply.text, reply.prompt_tokens, reply.completion_tokens, reply.cost, time.time()),
        )

    def __len__(self) -> int:
        return int(self._store.query(f"SELECT COUNT(*) FROM {self._table}")[0][0])

    def close(self) -> None:
        self._store.close()


def _checked(raw: object, prompt_tokens: object, completion_tokens: object, cost: object) -> CachedReply:
    if not isinstance(raw, bytes):
        raise DamagedRow("no reply text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DamagedRow(f"reply text is not valid UTF-8 (byte offset {exc.start})") from None
    if not text.strip():
        raise DamagedRow("empty reply text")
    if cost is not None and (not isinstance(cost, int | float) or not math.isfinite(cost) or cost < 0):
        raise DamagedRow(f"cost is {cost!r}, not a price")
    return CachedReply(
        text,
        _token_count("prompt_tokens", prompt_tokens),
        _token_count("completion_tokens", completion_tokens),
        None if cost is None else float(cost),
    )


def _token_count(name: str, value: object) -> int:
    if not isinstance(value, int) or value < 0:
        raise DamagedRow(f"{name} is {value!r}, not a token count")
    return value
