"""The SQLite store under the disk caches, and atomic file writes."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from composer.files import write_atomic
from composer.llm.cache import CachedReply, LLMCache
from composer.store import SqliteStore

_SCHEMA = ("CREATE TABLE IF NOT EXISTS items (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",)


def test_store_creates_the_schema_in_wal_mode_and_writes_all_or_nothing(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "sub" / "s.sqlite", _SCHEMA, busy_timeout_s=5.0, page_size=8192)
    store.execute_many("INSERT INTO items VALUES (?, ?)", [("a", 1), ("b", 2)])
    with pytest.raises(sqlite3.IntegrityError):
        store.execute_many("INSERT INTO items VALUES (?, ?)", [("c", 3), ("a", 4)])  # "a" exists
    assert store.query("SELECT key, value FROM items ORDER BY key") == [("a", 1), ("b", 2)]  # no "c"
    store.execute("DELETE FROM items WHERE key = ?", ("b",))
    assert store.query("SELECT COUNT(*) FROM items") == [(1,)]
    store.close()
    raw = sqlite3.connect(tmp_path / "sub" / "s.sqlite")
    assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert raw.execute("PRAGMA page_size").fetchone() == (8192,)


def _put_reply(cache: LLMCache) -> None:
    cache.put("child", "m", CachedReply("from the child", 1, 2, None))


def test_llm_cache_opened_before_a_fork_works_in_the_child(tmp_path: Path) -> None:
    """A SQLite connection must not cross a fork: the child opens its own (workers fork from a study)."""
    cache = LLMCache(tmp_path / "replies.sqlite")
    cache.put("parent", "m", CachedReply("from the parent", 1, 1, 0.5))
    child = multiprocessing.get_context("fork").Process(target=_put_reply, args=(cache,))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert cache.get("child") == CachedReply("from the child", 1, 2, None)
    assert cache.get("parent") == CachedReply("from the parent", 1, 1, 0.5) and len(cache) == 2


def test_write_atomic_replaces_whole_files_and_leaves_no_temporary_behind(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    write_atomic(target, "old")
    write_atomic(target, "نسخه جدید\n", fsync=True)
    assert target.read_text(encoding="utf-8") == "نسخه جدید\n"
    with pytest.raises(TypeError):
        write_atomic(target, 42)  # type: ignore[arg-type]
    assert target.read_text(encoding="utf-8") == "نسخه جدید\n"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]
