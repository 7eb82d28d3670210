"""Corpora from files, DataFrames, lists of dicts, or a folder of .txt / .md files.

Fields (names match case-insensitively): ``id`` (also ``_id`` as in BEIR, ``doc_id``, ``docid``),
``title``, ``text`` (also ``contents`` as in Pyserini, ``content``), ``metadata`` (an object; any other
column is added to it). Text is kept exactly as given, since chunk offsets point into it. A missing id is
``d-`` + the first 12 hex digits of SHA-1 of the text (``-2``, ``-3``... for repeated texts).

In a folder, every .txt and .md file below it (hidden files and folders excluded) is a document whose id is
its path relative to the folder in POSIX form (``guides/setup.md``) and whose title is the file stem;
empty files are skipped with a warning.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from composer.data.fields import IdMaker, Where, as_id, as_metadata, as_text, parse_rows, split_fields
from composer.data.readers import read_source, read_text
from composer.data.types import Corpus, Document
from composer.errors import InputError

logger = logging.getLogger(__name__)

FOLDER_EXTENSIONS = (".txt", ".md")

_ALIASES = {
    **dict.fromkeys(("id", "_id", "doc_id", "docid"), "id"),
    **dict.fromkeys(("text", "contents", "content"), "text"),
    "title": "title",
    "metadata": "metadata",
}


def load_corpus(source: Any) -> Corpus:
    """Load a corpus: a path (.jsonl, .json, .csv, .tsv, .xlsx, .parquet, or a folder), a DataFrame or a
    list of dicts."""
    if isinstance(source, (str, Path)) and Path(source).is_dir():
        return _load_folder(Path(source))
    records = read_source(source)
    return Corpus([doc for _, doc in parse_rows(records, "document", "d", _document)], records.source)


def _document(row: dict[str, Any], where: Where, make_id: IdMaker) -> Document:
    fields, extra = split_fields(row, _ALIASES, where)
    text = as_text(fields.get("text"), where, "text")
    if text is None or not text.strip():
        raise where.error("missing document text", field="text")
    return Document(
        id=as_id(fields.get("id"), where) or make_id.make(text),
        text=text,
        title=(as_text(fields.get("title"), where, "title") or "").strip(),
        metadata={**extra, **as_metadata(fields.get("metadata"), where)},
    )


def _load_folder(root: Path) -> Corpus:
    paths = sorted(
        (p.relative_to(root).as_posix(), p)
        for p in root.rglob("*")
        if p.suffix.lower() in FOLDER_EXTENSIONS
        and p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )
    if not paths:
        raise InputError(f"no {' or '.join(FOLDER_EXTENSIONS)} files in this folder", path=root)
    documents: list[Document] = []
    empty: list[str] = []
    for doc_id, path in paths:
        text = read_text(path)
        if text.strip():
            documents.append(Document(id=doc_id, text=text, title=path.stem))
        else:
            empty.append(doc_id)
    if empty:
        logger.warning("%s: skipped %d empty file(s) (e.g. %s)", root, len(empty), ", ".join(empty[:3]))
    if not documents:
        raise InputError("every .txt / .md file in this folder is empty", path=root)
    return Corpus(documents, str(root))
