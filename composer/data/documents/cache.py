"""Extracted text by content hash, so reading an unchanged folder again costs hashing its files only.

One SQLite file (``composer.store.SqliteStore``) under the user's cache directory: ``$COMPOSER_CACHE_DIR``,
else ``$XDG_CACHE_HOME/composer``, else ``~/.cache/composer``. The key is the SHA-256 of the bytes that
were parsed (read once, so a file changed or cut mid-read is never stored under another content's key)
and ``READER_VERSION``; skips that follow from the content (encrypted, scanned, damaged) are kept too.
A cache that cannot be opened (read-only home) is done without, with a warning.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path
from typing import Any

from composer.data.documents.extracted import Extracted, Skipped
from composer.files import default_cache_dir
from composer.store import SqliteStore

logger = logging.getLogger(__name__)

FILENAME = "documents.sqlite3"
READER_VERSION = 1
"""Raised whenever a reader or a repair changes what it gives, so older entries are never read."""
_SCHEMA = ("CREATE TABLE IF NOT EXISTS extracted (key TEXT PRIMARY KEY, value TEXT NOT NULL)",)


class DocumentCache:
    def __init__(self, directory: Path | None = None) -> None:
        self.file = (directory or default_cache_dir()) / FILENAME
        self._store: SqliteStore | None = None
        try:
            self._store = SqliteStore(self.file, _SCHEMA, busy_timeout_s=60.0)
        except (OSError, sqlite3.Error) as e:  # the cache is optional: the folder is read without it
            logger.warning("%s: document cache unavailable (%s); every file is read in full", self.file, e)

    def get(self, key: str) -> Extracted | Skipped | None:
        if self._store is None:
            return None
        rows = self._store.query("SELECT value FROM extracted WHERE key = ?", (key,))
        if not rows:
            return None
        data: dict[str, Any] = json.loads(rows[0][0])
        if "skipped" in data:
            return Skipped(data["skipped"], data["message"])
        return Extracted.from_json(data)

    def put(self, key: str, value: Extracted | Skipped) -> None:
        if self._store is None:
            return
        if isinstance(value, Skipped):
            data: dict[str, Any] = {"skipped": value.reason, "message": value.message}
        else:
            data = value.to_json()
        self._store.execute(
            "INSERT OR REPLACE INTO extracted (key, value) VALUES (?, ?)",
            (key, json.dumps(data, ensure_ascii=False)),
        )

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


def cache_key(digest: str) -> str:
    return f"v{READER_VERSION}:{digest}"
