"""The LLM reply cache: one SQLite file shared by every process of a study, so no call is paid twice."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from composer.store import SqliteStore

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
    """Replies by cache key in one SQLite file, shared by processes and threads (see ``SqliteStore``)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._store = SqliteStore(self.path, (_SCHEMA,), busy_timeout_s=60.0)

    def get(self, key: str) -> CachedReply | None:
        rows = self._store.query(
            "SELECT text, prompt_tokens, completion_tokens, cost FROM replies WHERE key = ?", (key,)
        )
        return CachedReply(rows[0][0], int(rows[0][1]), int(rows[0][2]), rows[0][3]) if rows else None

    def put(self, key: str, model: str, reply: CachedReply) -> None:
        self._store.execute(
            "INSERT OR REPLACE INTO replies VALUES (?, ?, ?, ?, ?, ?, ?)",
            (key, model, reply.text, reply.prompt_tokens, reply.completion_tokens, reply.cost, time.time()),
        )

    def __len__(self) -> int:
        return int(self._store.query("SELECT COUNT(*) FROM replies")[0][0])

    def close(self) -> None:
        self._store.close()
