"""The SQLite store under the disk caches (damaged files moved aside and rebuilt), and atomic file writes."""

from __future__ import annotations

import multiprocessing
import os
import random
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from composer.embedding import EmbeddingCache
from composer.files import write_atomic
from composer.llm.cache import CachedReply, LLMCache
from composer.store import SqliteStore, sqlite_problem

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


# -- damaged files are moved aside and rebuilt -------------------------------------------------------------


def damage(file: Path, how: str) -> None:
    """What a disk, a crash or a stray ``dd`` does to a file: seeded, so every run damages the same bytes."""
    size = file.stat().st_size
    noise = random.Random(9).randbytes(4096)
    with file.open("r+b") as f:
        if how == "garbage header":  # dd if=/dev/urandom of=FILE bs=4096 count=1 conv=notrunc
            f.write(noise)
        elif how == "truncated":
            f.truncate(size // 2)
        elif how == "random bytes in the middle":
            f.seek(size // 2)
            f.write(noise)
        elif how == "empty file":
            f.truncate(0)
        else:
            raise ValueError(how)


DAMAGES = ["garbage header", "truncated", "random bytes in the middle", "empty file"]


def fill_embeddings(directory: Path) -> tuple[list[bytes], np.ndarray]:
    vectors = np.random.default_rng(0).standard_normal((1000, 96)).astype(np.float32)
    keys = [i.to_bytes(16, "little") for i in range(len(vectors))]
    with EmbeddingCache(directory) as cache:
        cache.put_many(keys, vectors)
    return keys, vectors


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_embedding_cache_is_moved_aside_and_rebuilt_with_a_warning(
    how: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    keys, vectors = fill_embeddings(tmp_path)
    file = tmp_path / "embeddings.sqlite3"
    damage(file, how)
    damaged_bytes = file.read_bytes()
    with caplog.at_level("WARNING", logger="composer.store"), EmbeddingCache(tmp_path) as cache:
        found = cache.get_many(keys)  # rows read before the damage was met are sound; the rest are misses
        assert all(np.array_equal(found[key], vectors[i]) for i, key in enumerate(keys) if key in found)
        assert len(found) < len(keys) and len(cache) == 0
        cache.put_many(keys[:3], vectors[:3])  # what the caller does with a miss: encode it, store it
        assert len(cache) == 3
    aside = sorted(tmp_path.glob("embeddings.sqlite3.corrupt-*"))
    if how == "empty file":  # an empty file is an empty database, not a damaged one
        assert aside == [] and caplog.text == ""
        return
    moved = [p for p in aside if not p.name.endswith(("-wal", "-shm"))]  # and its log, if it had one
    assert len(moved) == 1 and re.fullmatch(r"embeddings\.sqlite3\.corrupt-\d{8}T\d{6}Z", moved[0].name)
    assert moved[0].read_bytes() == damaged_bytes
    assert f"{file} is unreadable" in caplog.text
    assert f"moved aside to {moved[0].name}; it will be rebuilt" in caplog.text
    caplog.clear()
    with EmbeddingCache(tmp_path) as again:  # the new file is sound: no second warning
        assert set(again.get_many(keys)) == set(keys[:3])
    assert caplog.text == ""


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_llm_cache_is_rebuilt_and_the_replies_come_back_the_same(
    how: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "replies.sqlite"
    replies = {f"k{i}": CachedReply(f"reply {i} " + "نص " * 40, i, 2 * i, None) for i in range(400)}
    cache = LLMCache(path)
    for key, reply in replies.items():
        cache.put(key, "m", reply)
    cache.close()
    damage(path, how)
    with caplog.at_level("WARNING", logger="composer.store"):
        cache = LLMCache(path)
        found = {key: cache.get(key) for key in replies}
        assert all(reply in (None, replies[key]) for key, reply in found.items())
        for key, reply in replies.items():  # what a client does on a miss: ask again, store the reply
            cache.put(key, "m", reply)
        assert [cache.get(key) for key in replies] == list(replies.values())
        cache.close()
    moved = list(tmp_path.glob("replies.sqlite.corrupt-*"))
    assert (how == "empty file") == (moved == [])
    assert (how == "empty file") == (f"{path} is unreadable" not in caplog.text)


OPEN_AND_WRITE = """
import sys
from pathlib import Path
from composer.store import SqliteStore
schema = ("CREATE TABLE IF NOT EXISTS items (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",)
go = Path(sys.argv[2])
while not go.exists():
    pass
store = SqliteStore(sys.argv[1], schema, busy_timeout_s=30.0)
store.execute_many("INSERT INTO items VALUES (?, ?)", [(f"{sys.argv[3]}-{i}", i) for i in range(50)])
"""


def test_two_processes_finding_one_damaged_file_move_it_aside_once(tmp_path: Path) -> None:
    file = tmp_path / "s.sqlite"
    store = SqliteStore(file, _SCHEMA, busy_timeout_s=5.0)
    store.execute_many("INSERT INTO items VALUES (?, ?)", [(str(i), i) for i in range(100)])
    store.close()
    damage(file, "garbage header")
    go = tmp_path / "go"
    root = Path(__file__).resolve().parents[2]
    procs = [
        subprocess.Popen([sys.executable, "-c", OPEN_AND_WRITE, str(file), str(go), name], cwd=root)
        for name in ("a", "b")
    ]
    go.touch()  # both start opening the damaged file at the same moment
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert len(list(tmp_path.glob("s.sqlite.corrupt-*[0-9]Z"))) == 1
    assert SqliteStore(file, _SCHEMA, busy_timeout_s=5.0).query("SELECT COUNT(*) FROM items") == [(100,)]


HOLD_OPEN = """
import sys
from composer.store import SqliteStore
schema = ("CREATE TABLE IF NOT EXISTS items (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",)
store = SqliteStore(sys.argv[1], schema, busy_timeout_s=5.0)
print(store.query("SELECT COUNT(*) FROM items")[0][0], flush=True)
sys.stdin.read()  # holds the file open until the test closes stdin
"""


def test_a_damaged_file_another_process_holds_open_is_left_in_place_until_it_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Moving it would let the holder's SQLite delete the new file's log by name when it closes: this
    process carries on in memory instead, and the file is moved once nobody has it open."""
    monkeypatch.setattr("composer.store.RECOVER_WAIT_S", 0.3)
    file = tmp_path / "s.sqlite"
    store = SqliteStore(file, _SCHEMA, busy_timeout_s=5.0)
    store.execute_many("INSERT INTO items VALUES (?, ?)", [(str(i), i) for i in range(3000)])
    store.close()
    root = Path(__file__).resolve().parents[2]
    holder = subprocess.Popen([sys.executable, "-c", HOLD_OPEN, str(file)], cwd=root, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "3000"
    damage(file, "garbage header")
    with caplog.at_level("WARNING", logger="composer.store"):
        store = SqliteStore(file, _SCHEMA, busy_timeout_s=5.0)
        assert store.query("SELECT SUM(value) FROM items") == [(None,)]  # an empty store, in memory
        store.execute("INSERT INTO items VALUES ('x', 1)")
        assert store.query("SELECT value FROM items") == [(1,)]
    assert "open in another process" in caplog.text
    assert not list(tmp_path.glob("s.sqlite.corrupt-*"))
    store.close()
    assert holder.stdin is not None
    holder.stdin.close()
    assert holder.wait(timeout=60) == 0
    caplog.clear()
    with caplog.at_level("WARNING", logger="composer.store"):
        store = SqliteStore(file, _SCHEMA, busy_timeout_s=5.0)
        assert store.query("SELECT SUM(value) FROM items") == [(None,)]
    assert "moved aside" in caplog.text and len(list(tmp_path.glob("s.sqlite.corrupt-*[0-9]Z"))) == 1


def test_a_store_file_another_worker_is_creating_is_not_taken_for_an_emptied_one(tmp_path: Path) -> None:
    """Two workers starting on a fresh work dir: the second may see the first's optuna.db at 0 bytes
    for a moment. It waits for the header; only a file left empty is reported."""
    import threading
    import time

    db = tmp_path / "optuna.db"
    db.write_bytes(b"")

    def create() -> None:
        time.sleep(0.5)
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE t (x)")

    creator = threading.Thread(target=create)
    creator.start()
    assert sqlite_problem(db) is None
    creator.join()
    left = tmp_path / "left.db"
    left.write_bytes(b"")
    os.utime(left, (0, 0))
    assert sqlite_problem(left) == "empty (0 bytes)"


def test_a_store_busy_in_another_process_is_not_called_damaged(tmp_path: Path) -> None:
    db = tmp_path / "busy.db"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        assert sqlite_problem(db) is None
    finally:
        holder.execute("ROLLBACK")
        holder.close()
