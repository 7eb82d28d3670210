"""The spool: trial records the MLflow writer has not written yet, kept on disk until it has.

A study writes each record into its own spool folder (atomic write) and the writer process
(``composer.tracking.writer``) deletes a file only once its run is written: records of a killed study, or
of a writer that died, are written when the study resumes (``Orphans``). A trial's record is its frozen
trial alone; what it produced for its run's artifacts and traces (``TrialArtifacts``) was spooled by the
runner when it finished the trial, under the trial's number, and is deleted with the record. Chunk tables
are spooled once per index, not per trial.

    <workdir>/spool/<study>/<host>-<pid>-<token>/000012-trial.rec   (one folder per live tracker, locked)
    <workdir>/spool/<study>/artifacts/000012.rec   (trial 12's TrialArtifacts, whichever worker ran it)
    <workdir>/spool/<study>/tables/<index key>/{ids,doc_ids,texts}   (TextColumn files)
    <workdir>/spool/<study>/untraced/000007-trial.rec   (written without traces, until the study ends)

A work dir may sit on a shared drive or come from elsewhere, so what the writer reads from it is data,
never code: a record is a JSON document and the numpy arrays it refers to, read without pickle
(``write_record``, ``read_record``), and the only objects rebuilt from it are of the types named in
``_CLASSES``. The writer reads only the user's own files, never through a symbolic link (``refusal``).
Records pickled by earlier Composer versions (``*.pkl``) are never read: a pickle can run any code.
"""

from __future__ import annotations

import errno
import json
import math
import os
import secrets
import shutil
import socket
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from composer.data.columns import TextColumn
from composer.data.ranking import ChunkTable, Ranking
from composer.data.types import Hit
from composer.evaluation.report import EvaluationReport, SampleTable, StageError
from composer.files import atomic_output, not_regular, plain_name
from composer.locks import FileLock
from composer.summary import (
    Contender,
    Difference,
    HeldOut,
    IndexCounts,
    JudgeAgreement,
    ObjectiveSummary,
    Separation,
    StudyLog,
    StudySummary,
)
from composer.tracking.trial import TrialArtifacts, frozen_from_dict, frozen_to_dict

TABLES = "tables"
ARTIFACTS = "artifacts"
TABLE_COLUMNS = ("ids", "doc_ids", "texts")
UNTRACED = "untraced"
"""Records of trials written without their MLflow traces, kept until the study ends (the leaders' traces
are written then)."""
OWNER_LOCK = ".owner.lock"
WRITER_LOCK = ".writer.lock"
"""A spool folder is held by its tracker (``<ident>.owner.lock``) and by the writer serving it
(``<ident>.writer.lock``): after the study dies, its writer may still be writing what it was sent, so a
folder is an orphan only when neither holds it."""
RECORD = ".rec"
LEGACY = ".pkl"
"""Records of the Composer versions that pickled them: set aside unread."""
LEGACY_WHY = "a pickled record, from an older Composer version or an untrusted source: a pickle can run code"
ASIDE = ".unreadable"
"""Added to the name of a record of the user's own that cannot be read, so that no writer tries it again."""
MAGIC = b"composer-spool 1"
"""A record starts with a line of ``HEAD`` bytes: this, then the length of the array bytes that follow it
(each array 8-byte aligned, its dtype, shape and offset in the JSON document that ends the file)."""
HEAD = 32
ALIGN = 8
TAG = "$"
"""The key of a JSON object standing for a value JSON has no type for. A dict holding it (or keys that are
not strings) is written as a tagged list of pairs, so no data can pass for a tag."""


class Spool:
    """A study's spool folder (see the module docstring); ``owner`` is this process's own subfolder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tables = root / TABLES
        self.tables.mkdir(parents=True, exist_ok=True)
        self.artifacts = root / ARTIFACTS
        self.artifacts.mkdir(exist_ok=True)
        ident = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self._lock = FileLock.create_held(root / f"{ident}{OWNER_LOCK}")
        self.owner = root / ident
        self.owner.mkdir()
        self._count = 0
        self._tables: set[str] = set()

    def put(self, kind: str, payload: Any) -> Path:
        """Write ``payload`` into a new record of this owner; chunk tables go to ``tables/`` by key."""
        self._count += 1
        path = self.owner / f"{self._count:06d}-{kind}{RECORD}"
        write_record(path, payload, self.table)
        return path

    def put_artifacts(self, number: int, artifacts: TrialArtifacts) -> Path:
        """Write what trial ``number`` produced for its run, as the runner finishes it (before Optuna tells
        its end): the writer reads it back by the trial's number (``artifacts_file``)."""
        path = artifacts_file(self.root, number)
        write_record(path, artifacts, self.table)
        return path

    def table(self, table: ChunkTable) -> None:
        """Spool ``table`` once under its key, as three ``TextColumn`` files the writer maps instead of
        loading: a 250,000-chunk table took it 0.6 GB as Python strings. Written into a folder of its own,
        then renamed into place: a table is whole or absent."""
        if table.key not in self._tables:
            folder = self.tables / table.key
            if not folder.exists():
                tmp = self.tables / f".{table.key}.{os.getpid()}.{secrets.token_hex(3)}"
                tmp.mkdir()
                try:
                    for name in TABLE_COLUMNS:
                        TextColumn.write(tmp / name, getattr(table, name))
                    os.rename(tmp, folder)
                except OSError:
                    if not folder.is_dir():  # else another worker spooled it first
                        raise
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
            self._tables.add(table.key)

    def release(self) -> None:
        """Drop this owner's folder if the writer emptied it, then its lock."""
        if not any(self.owner.iterdir()):
            shutil.rmtree(self.owner, ignore_errors=True)
            self._lock.path.unlink(missing_ok=True)
            self.owner.with_name(self.owner.name + WRITER_LOCK).unlink(missing_ok=True)
        self._lock.release()


def artifacts_file(root: Path, number: int) -> Path:
    """Where the spool at ``root`` keeps trial ``number``'s ``TrialArtifacts``."""
    return root / ARTIFACTS / f"{number:06d}{RECORD}"


class Refused(Exception):
    """A spool file the writer does not read: not the user's own, not a regular file, or a pickle."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path} is not read ({why})")
        self.path = path
        self.why = why


def refusal(path: Path) -> str | None:
    """Why the writer must not read ``path``, a file or folder of the spool: a symbolic link, or one another
    user owns (a work dir on a shared drive, or downloaded, holds what others wrote); None when it may."""
    return _refusal(path.lstat())


def _refusal(status: os.stat_result) -> str | None:
    if stat.S_ISLNK(status.st_mode):
        return "a symbolic link"
    if status.st_uid != os.geteuid():
        return f"owned by another user, uid {status.st_uid}"
    return None


def set_aside(path: Path, why: str) -> str:
    """Say that ``path`` is not read, and why, naming it. A file of the user's own is renamed
    ``<name>.unreadable`` so that no writer tries it again; another user's, or a link, is left as it is."""
    try:
        if refusal(path) is None:
            aside = path.with_name(path.name + ASIDE)
            path.rename(aside)
            return f"{path} is not read ({why}): moved aside to {aside.name}"
    except FileNotFoundError:
        pass  # moved or removed meanwhile
    return f"{path} is not read ({why}); left as it is"


def write_record(path: Path, payload: Any, table: Callable[[ChunkTable], None]) -> None:
    """Write ``payload`` to ``path`` as a record (atomically, readable by the user only: it holds the
    questions and answers); ``table`` spools a chunk table with a key, which the record names by it."""
    encoder = _Encoder(table)
    document = json.dumps(encoder.encode(payload), ensure_ascii=False, separators=(",", ":"))
    with atomic_output(path, private=True) as out:
        out.write(b"%s %*d\n" % (MAGIC, HEAD - len(MAGIC) - 2, encoder.size))
        for array, padding in encoder.arrays:
            out.write(b"\0" * padding)
            out.write(array.data)
        out.write(document.encode("utf-8", "surrogatepass"))


def read_record(path: Path, tables: Path, cache: dict[str, ChunkTable]) -> Any:
    """The payload of the record at ``path``; its chunk tables are mapped from ``tables`` once (kept in
    ``cache``). Refused for a file that must not be read (``refusal``; a pickle), ValueError (or TypeError)
    for one that is no record of this version, FileNotFoundError for one gone."""
    if path.suffix == LEGACY:
        raise Refused(path, LEGACY_WHY)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(path, "a symbolic link") from None
        raise
    with os.fdopen(fd, "rb") as file:
        status = os.fstat(fd)
        kind = not_regular(status.st_mode)
        why = _refusal(status) or (None if kind is None else f"not a regular file but {kind}")
        if why is not None:
            raise Refused(path, why)
        data = bytearray(status.st_size)  # arrays are made on its bytes, writable as unpickled ones were
        file.readinto(data)
    size = data[len(MAGIC):HEAD].strip()
    if not data.startswith(MAGIC + b" ") or not size.isdigit() or HEAD + int(size) > len(data):
        raise ValueError("not a spool record of this Composer version")
    arrays = memoryview(data)[HEAD:HEAD + int(size)]
    document = data[HEAD + int(size):].decode("utf-8", "surrogatepass")
    return json.loads(document, object_hook=_Decoder(arrays, tables, cache))


_CLASSES: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (TrialArtifacts, SampleTable, Ranking, ChunkTable, Hit, StageError, StudyLog, StudySummary,
                ObjectiveSummary, IndexCounts, HeldOut, Contender, Difference, Separation,
                JudgeAgreement)
}
"""The dataclasses a record may hold, rebuilt from their fields by name: nothing else is ever built."""
_FIELDS = {cls: tuple(f.name for f in fields(cls)) for cls in _CLASSES.values()}


_PLAIN = frozenset({str, float, int, bool, type(None)})
"""Types JSON writes as they are."""


class _Encoder:
    """A payload as JSON values, with its numpy arrays (and bytes) set apart in ``arrays`` and its chunk
    tables with a key passed to ``table`` and named by it."""

    def __init__(self, table: Callable[[ChunkTable], None]) -> None:
        self.table = table
        self.arrays: list[tuple[npt.NDArray[Any], int]] = []
        """Each array (C-contiguous), and the padding before it."""
        self.size = 0
        """Bytes of the arrays and their padding."""

    def encode(self, obj: Any) -> Any:
        kind = type(obj)
        if obj is None or kind is str or kind is float or kind is int or kind is bool:
            return obj
        if kind is list:  # question ids and texts (1,395 strings a record on ARCD) go as they are
            return obj if all(type(v) in _PLAIN for v in obj) else [self.encode(v) for v in obj]
        if kind is dict:
            if TAG not in obj and all(type(k) is str for k in obj):
                return {k: self.encode(v) for k, v in obj.items()}
            return {TAG: "dict", "items": [[self.encode(k), self.encode(v)] for k, v in obj.items()]}
        if kind is tuple:
            return {TAG: "tuple", "items": [self.encode(v) for v in obj]}
        if kind is ChunkTable and obj.key:
            self.table(obj)
            return {TAG: "chunk-table", "key": obj.key}
        if kind is SampleTable and obj.retrieved is not None and not isinstance(obj.retrieved, Ranking):
            node = {name: self.encode(getattr(obj, name)) for name in _FIELDS[kind] if name != "retrieved"}
            return {TAG: "SampleTable", **node, "retrieved": self._hit_lists(obj.retrieved)}
        if kind in _FIELDS:
            return {TAG: kind.__name__, **{name: self.encode(getattr(obj, name)) for name in _FIELDS[kind]}}
        if isinstance(obj, np.ndarray):
            return self._array(obj)
        if isinstance(obj, bytes):
            return {TAG: "bytes", "array": self._array(np.frombuffer(obj, np.uint8))}
        if isinstance(obj, datetime):
            return {TAG: "datetime", "iso": obj.isoformat()}
        if kind.__name__ == "FrozenTrial" and kind.__module__.startswith("optuna."):
            return {TAG: "FrozenTrial", "trial": self.encode(frozen_to_dict(obj))}
        if isinstance(obj, EvaluationReport):
            return {TAG: "EvaluationReport", "table": self.encode(obj.table), "ks": list(obj.ks),
                    "match_mode": obj.match_mode, "meta": self.encode(obj.meta)}
        if isinstance(obj, pd.DataFrame):
            return self._frame(obj)
        if isinstance(obj, np.generic):
            return self.encode(obj.item())
        if isinstance(obj, str | int | float):  # subclasses (numpy's float64, enums): JSON writes their value
            return obj
        if isinstance(obj, Mapping):
            return self.encode(dict(obj))
        if isinstance(obj, Sequence | set | frozenset):
            return self.encode(list(obj))
        # Anything else (a path, an object a user's system put in its answer's metadata) as its text: a
        # record is what MLflow shows, and recording must never fail a trial that ran.
        return str(obj)

    def _array(self, array: npt.NDArray[Any]) -> Any:
        if array.dtype.hasobject:  # Python objects: as the list they hold, never as raw bytes
            return self.encode(array.tolist())
        array = np.ascontiguousarray(array)
        padding = -self.size % ALIGN
        self.arrays.append((array, padding))
        self.size += padding
        node = {TAG: "array", "dtype": array.dtype.str, "shape": list(array.shape), "at": self.size}
        self.size += array.nbytes
        return node

    def _hit_lists(self, rows: Sequence[Sequence[Hit]]) -> dict[str, Any]:
        """Each question's hits (batches scored apart are joined this way) as columns, and each distinct
        text once: a chunk is retrieved for many questions. As a Hit apiece they cost twice the time."""
        hits = [hit for row in rows for hit in row]
        texts: dict[str | None, int] = {}
        text_at = [texts.setdefault(hit.text, len(texts)) for hit in hits]
        return {
            TAG: "hit-lists",
            "lengths": self._array(np.array([len(row) for row in rows], np.int64)),
            "ids": [hit.id for hit in hits],
            "scores": self._array(np.array([hit.score for hit in hits], np.float64)),
            "texts": self._array(np.array(text_at, np.int64)),
            "doc_ids": [hit.doc_id for hit in hits],
            "distinct_texts": list(texts),
        }

    def _frame(self, frame: pd.DataFrame) -> dict[str, Any]:
        """Columns of a plain numpy dtype as arrays, others (strings, objects) as lists and their dtype."""
        data = [
            column.to_numpy() if isinstance(column.dtype, np.dtype) and not column.dtype.hasobject
            else column.tolist()
            for _, column in frame.items()
        ]
        return {TAG: "DataFrame", "columns": self.encode(list(frame.columns)),
                "dtypes": [str(dtype) for dtype in frame.dtypes], "data": self.encode(data),
                "index": self.encode(frame.index.tolist())}


class _Decoder:
    """``json.loads``'s object hook: a tagged object back to its value, innermost first."""

    def __init__(self, arrays: memoryview, tables: Path, cache: dict[str, ChunkTable]) -> None:
        self.arrays = arrays
        self.tables = tables
        self.cache = cache

    def __call__(self, node: dict[str, Any]) -> Any:
        match node.get(TAG):
            case None:
                return node
            case "dict":
                return {key: value for key, value in node["items"]}
            case "tuple":
                return tuple(node["items"])
            case "array":
                return self._array(node)
            case "bytes":
                return node["array"].tobytes()
            case "datetime":
                return datetime.fromisoformat(node["iso"])
            case "chunk-table":
                return self._table(node["key"])
            case "hit-lists":
                return _hit_lists(node)
            case "EvaluationReport":
                return EvaluationReport(node["table"], node["ks"], node["match_mode"], node["meta"])
            case "DataFrame":
                return _frame(node)
            case "FrozenTrial":
                return frozen_from_dict(node["trial"])
            case "ChunkTable" if node.get("key"):  # a keyed table is named, never given inline
                raise ValueError("a chunk table with a key given inline")
            case str(name) if name in _CLASSES:
                return _CLASSES[name](**{k: v for k, v in node.items() if k != TAG})
            case other:
                raise ValueError(f"unknown value type {other!r}")

    def _array(self, node: dict[str, Any]) -> npt.NDArray[Any]:
        """An array on the record's bytes: of a plain dtype (never Python objects), within them."""
        dtype, shape, at = np.dtype(node["dtype"]), tuple(node["shape"]), node["at"]
        if dtype.hasobject or type(at) is not int or not all(type(n) is int and n >= 0 for n in shape):
            raise ValueError(f"not an array: {dtype} {shape} at {at!r}")
        count = math.prod(shape)
        if not 0 <= at <= len(self.arrays) - count * dtype.itemsize:
            raise ValueError(f"array of {count} {dtype} at {at} past the record's end")
        return np.frombuffer(self.arrays, dtype, count, at).reshape(shape)

    def _table(self, key: Any) -> ChunkTable:
        """The chunk table spooled under ``key``, mapped from its columns, once: a key is a plain name, and
        its folder and files must be the user's own."""
        if not plain_name(key):
            raise ValueError(f"no chunk table {key!r}")
        if key not in self.cache:
            folder = self.tables / key
            columns = [folder / name for name in TABLE_COLUMNS]
            for path in (self.tables, folder, *columns):
                why = refusal(path)
                if why is not None:
                    raise Refused(path, why)
            ids, doc_ids, texts = (TextColumn(path) for path in columns)
            self.cache[key] = ChunkTable(ids, doc_ids, texts, key=key)
        return self.cache[key]


def _first_refused(paths: Sequence[Path]) -> str | None:
    """Of ``paths`` (absent ones pass), the first that must not be read, said in words naming it."""
    for path in paths:
        try:
            why = refusal(path)
        except FileNotFoundError:
            continue
        if why is not None:
            return f"{path} is not read ({why}); left as it is"
    return None


def _hit_lists(node: dict[str, Any]) -> list[list[Hit]]:
    texts = node["distinct_texts"]
    hits = [
        Hit(id_, score, texts[text], doc_id)
        for id_, score, text, doc_id in zip(
            node["ids"], node["scores"].tolist(), node["texts"].tolist(), node["doc_ids"], strict=True
        )
    ]
    ends = np.cumsum(node["lengths"]).tolist()
    return [hits[end - n:end] for n, end in zip(node["lengths"].tolist(), ends, strict=True)]


def _frame(node: dict[str, Any]) -> pd.DataFrame:
    """A DataFrame from its columns; only those whose dtype pandas infers otherwise are converted."""
    frame = pd.DataFrame(dict(enumerate(node["data"])), index=pd.RangeIndex(len(node["index"])))
    differ = {i: dtype for i, (have, dtype) in enumerate(zip(frame.dtypes, node["dtypes"], strict=True))
              if str(have) != dtype}
    if differ:
        frame = frame.astype(differ)
    frame.columns = pd.Index(node["columns"])
    frame.index = pd.Index(node["index"])
    return frame


class Orphans:
    """Spool folders of trackers that are gone, and their records: what a writer writes first. They are
    held (their locks taken) from here until ``release``, after they are written, so two writers starting
    together never both write them. A dead tracker's writer may still be writing what it was sent; it is
    waited for, so two writers never write one trial. A folder (or lock) that is not the user's own, or a
    link, is not touched: said in ``refused``."""

    def __init__(self, root: Path) -> None:
        self.files: list[Path] = []
        self.refused: list[str] = []
        self._held: list[tuple[Path, FileLock, FileLock]] = []
        if not root.is_dir():
            return
        for owner_path in sorted(root.glob(f"*{OWNER_LOCK}")):
            ident = owner_path.name.removesuffix(OWNER_LOCK)
            folder, writer_path = root / ident, root / f"{ident}{WRITER_LOCK}"
            refused = _first_refused((owner_path, writer_path, folder))
            if refused is not None:
                self.refused.append(refused)
                continue
            owner = FileLock(owner_path)
            if not owner.acquire(blocking=False):
                continue  # a live tracker's (its own writer handles it), or another writer adopted it
            writer = FileLock(writer_path)
            writer.acquire()  # at once, or when the dead tracker's writer has written its queue
            if folder.is_dir():
                self.files.extend(sorted(p for p in folder.iterdir() if p.suffix in (RECORD, LEGACY)))
            self._held.append((folder, owner, writer))

    def release(self) -> None:
        """Let go of every folder. One left without records it can write is no orphan any more: its lock
        files go, and the folder too unless it keeps files set aside or not the user's own."""
        for folder, owner, writer in self._held:
            left = list(folder.iterdir()) if folder.is_dir() else []
            # a file removed since the listing (by the user, say) is nothing to refuse: absent ones pass
            kept = [p for p in left if p.name.endswith(ASIDE) or _first_refused([p]) is not None]
            if not any(p.suffix == RECORD for p in left if p not in kept):
                if not kept:
                    shutil.rmtree(folder, ignore_errors=True)
                owner.path.unlink(missing_ok=True)
                writer.path.unlink(missing_ok=True)
            writer.release()
            owner.release()
        self._held = []
