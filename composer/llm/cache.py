"""The LLM reply cache: one SQLite file shared by every process of a study, so no call is paid twice."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS replies (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    text TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cost REAL,
    created REAL NOT NULL
)
"""


@dataclass(frozen=True)
class CachedReply:
    text: str
    prompt_tokens: int
    completion_tokens: int
    cost: float | None


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
    """Replies by cache key in SQLite (WAL: concurrent readers, writers wait on a busy timeout).

    One connection per thread, as sqlite3 connections must not cross threads.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._connect()  # create the schema now, so a bad path fails at construction

    def _connect(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(_SCHEMA)
            self._local.conn = conn
        return conn

    def get(self, key: str) -> CachedReply | None:
        row = (
            self._connect()
            .execute("SELECT text, prompt_tokens, completion_tokens, cost FROM replies WHERE key = ?", (key,))
            .fetchone()
        )
        return CachedReply(row[0], int(row[1]), int(row[2]), row[3]) if row else None

    def put(self, key: str, model: str, reply: CachedReply) -> None:
        self._connect().execute(
            "INSERT OR REPLACE INTO replies VALUES (?, ?, ?, ?, ?, ?, ?)",
            (key, model, reply.text, reply.prompt_tokens, reply.completion_tokens, reply.cost, time.time()),
        )

    def __len__(self) -> int:
        return int(self._connect().execute("SELECT COUNT(*) FROM replies").fetchone()[0])

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
