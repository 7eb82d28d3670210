"""What an index was built from, saved beside it, so reopening it never reads or analyses the corpus.

Reopening an index used to read the corpus, cut it into chunks and fit BM25 again, only to find the
collection already built (200,000 paragraphs: 60 s, 25 s of it BM25's analysis). Each built index now
leaves a folder ``<workdir>/indexes/<key>/``: ``index.json`` (the build record: format, key, index settings,
corpus fingerprint, embedder identity, fitted BM25 encoder, arrays' dtypes and shapes), ``chunks.json``
(the chunks, one list per field) and raw ``.bin`` arrays (the BM25 rows without IDF, the dense vectors),
mapped on load. That is all ``indexing.open_built`` needs: the collection is then checked (or rebuilt from
it) exactly as after a fit. The folder is written under a temporary name and renamed into place, so it
is complete or absent; it never changes once written (its key names its contents).
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from composer.chunking import Chunk
from composer.errors import ComposerError
from composer.index import Bm25Encoder
from composer.index.base import IndexDamaged
from composer.index.bm25 import SparseRows

SAVED_DIR = "indexes"
"""The work dir's folder of saved indexes, one folder per index key."""
FORMAT = "composer-saved-index/v1"
RECORD = "index.json"
CHUNKS = "chunks.json"
_FIELDS = tuple(f.name for f in dataclasses.fields(Chunk))


@dataclass(frozen=True, eq=False)
class Built:
    """What a collection is built from: its chunks, fitted BM25 encoder, the chunks' BM25 rows (without
    IDF) and dense vectors (None: BM25 only). ``open_or_build`` computes it from the corpus,
    ``composer.pipeline.saved`` loads it from disk."""

    key: str
    chunks: Sequence[Chunk]
    bm25: Bm25Encoder
    sparse: SparseRows
    dense: np.ndarray | None


def save_index(folder: Path, built: Built, record: Mapping[str, Any]) -> None:
    """Save ``built`` (and ``record``: the index settings, corpus fingerprint and embedder identity it
    was built for) as ``folder``, unless it is saved there already (another process may have won)."""
    if (folder / RECORD).is_file():
        return
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{folder.name}.{secrets.token_hex(4)}.tmp"
    tmp.mkdir()
    try:
        arrays = {"sparse.indptr": built.sparse.indptr, "sparse.indices": built.sparse.indices,
                  "sparse.values": built.sparse.values}
        if built.dense is not None:
            arrays["dense"] = built.dense
        shapes = {}
        for name, array in arrays.items():
            data = np.ascontiguousarray(array)
            data.tofile(tmp / f"{name}.bin")
            shapes[name] = {"dtype": data.dtype.str, "shape": list(data.shape)}
        columns = {name: [getattr(c, name) for c in built.chunks] for name in _FIELDS}
        (tmp / CHUNKS).write_text(json.dumps(columns, ensure_ascii=False), encoding="utf-8")
        head = {"format": FORMAT, "key": built.key, **record, "bm25": built.bm25.to_dict(),
                "n_chunks": len(built.chunks), "arrays": shapes}
        (tmp / RECORD).write_text(json.dumps(head, ensure_ascii=False, indent=1), encoding="utf-8")
        try:
            os.replace(tmp, folder)
        except OSError:
            if not (folder / RECORD).is_file():  # not a concurrent save of the same index: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def read_record(folder: Path) -> dict[str, Any]:
    """The build record of the index saved as ``folder``; IndexDamaged if it is unreadable."""
    path = folder / RECORD
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise IndexDamaged(str(folder), f"{RECORD} is unreadable: {exc}") from exc
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise IndexDamaged(str(folder), f"{RECORD} is not a saved index of format {FORMAT}")
    return record


def load_index(folder: Path) -> Built:
    """What the index saved as ``folder`` was built from, its arrays mapped read-only."""
    record = read_record(folder)
    try:
        arrays = {name: _mapped(folder / f"{name}.bin", spec) for name, spec in record["arrays"].items()}
        columns = json.loads((folder / CHUNKS).read_bytes())  # bytes: no text-mode read (250k chunks: -0.6 s)
        n = int(record["n_chunks"])
        if any(len(columns[name]) != n for name in _FIELDS):
            raise ValueError(f"{CHUNKS} does not hold {n} chunks")
        indexed = [tuple(span) if span is not None else None for span in columns["indexed"]]
        chunks = [Chunk(*row) for row in zip(*(columns[name] if name != "indexed" else indexed
                                                for name in _FIELDS), strict=True)]
        sparse = SparseRows(arrays["sparse.indptr"], arrays["sparse.indices"], arrays["sparse.values"])
        if len(sparse) != n:
            raise ValueError(f"its BM25 rows hold {len(sparse)} chunks, not {n}")
        bm25 = Bm25Encoder.from_dict(record["bm25"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise IndexDamaged(str(folder), f"its saved data is unreadable: {exc}") from exc
    return Built(record["key"], chunks, bm25, sparse, arrays.get("dense"))


def find_saved(root: Path, settings: Mapping[str, Any], embedder: str | None) -> list[Path]:
    """The indexes saved under ``root`` for these index settings and embedder identity (any corpus),
    newest first."""
    wanted = json.loads(json.dumps(settings))  # as a record stores them (tuples as lists)
    found = []
    for record_path in root.glob(f"*/{RECORD}"):
        try:
            record = read_record(record_path.parent)
        except IndexDamaged:
            continue  # reported when it is the one opened
        if record.get("settings") == wanted and record.get("embedder") == embedder:
            found.append(record_path.parent)
    return sorted(found, key=lambda p: (p / RECORD).stat().st_mtime_ns, reverse=True)


def missing_index(root: Path, settings: Mapping[str, Any]) -> ComposerError:
    """The error for a pipeline opened without a corpus where no index for its config is saved."""
    what = f"chunking {json.dumps(settings.get('chunking'), sort_keys=True)}"
    if "embedding" in settings:
        what += f", embedding {json.dumps(settings['embedding'], sort_keys=True)}"
    return ComposerError(
        f"no index for this config is saved under {root} ({what}): index a corpus first: "
        "pipeline.index(corpus), composer.load_pipeline(config, corpus), `composer index`, or give the "
        "command --corpus CORPUS"
    )


def _mapped(path: Path, spec: Mapping[str, Any]) -> np.ndarray:
    """The raw array file ``path`` of ``spec``'s dtype and shape, mapped read-only (an empty one in
    memory: a zero-length file cannot be mapped)."""
    dtype, shape = np.dtype(spec["dtype"]), tuple(int(d) for d in spec["shape"])
    expected = dtype.itemsize * int(np.prod(shape))
    size = path.stat().st_size
    if size != expected:
        raise ValueError(f"{path.name} holds {size} bytes, not {expected}")
    if not expected:
        return np.zeros(shape, dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=shape)
