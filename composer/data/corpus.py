"""Corpora from files, DataFrames, lists of dicts, or a folder of documents.

Fields (names match case-insensitively): ``id`` (also ``_id`` as in BEIR, ``doc_id``, ``docid``),
``title``, ``text`` (also ``contents`` as in Pyserini, ``content``), ``metadata`` (an object; any other
column is added to it). Text is kept exactly as given, since chunk offsets point into it. A missing id is
``d-`` + the first 12 hex digits of SHA-1 of the text (``-2``, ``-3``... for repeated texts).

In a folder, every .pdf, .docx, .pptx, .html/.htm, .md and .txt file below it (hidden files and folders
excluded) is a document whose id is its path relative to the folder in POSIX form and NFC
(``guides/setup.md``); one such file on its own is a corpus of one document named by its file name. Links
are followed inside the folder; a link out of it is skipped unless ``follow_links`` (see
``composer.data.documents.folder``). Titles are the PDF's or Word file's own title, the first heading
(Markdown, Word, HTML), else the file stem; page and heading offsets go in the metadata (see
``composer.data.documents``). Files that give no document (empty, encrypted, scanned,
damaged, too large, of another type, text that shows nothing, a FIFO or device, a broken link) are
skipped with a warning and listed in ``Corpus.tally``; with ``strict`` any of them is an error. In tables,
a document whose text is missing, or shows nothing (only zero-width characters, direction marks, BOMs), is
an error naming its line.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer.data.fields import (
    IdMaker,
    Where,
    as_id,
    as_metadata,
    as_text,
    normal_id,
    parse_rows,
    split_fields,
)
from composer.data.readers import read_source
from composer.data.types import Corpus, Document
from composer.errors import InputError
from composer.files import check_regular
from composer.unicode import invisible_only

if TYPE_CHECKING:
    from composer.data.documents import ReadTally
    from composer.data.documents.folder import Listing

_ALIASES = {
    **dict.fromkeys(("id", "_id", "doc_id", "docid"), "id"),
    **dict.fromkeys(("text", "contents", "content"), "text"),
    "title": "title",
    "metadata": "metadata",
}


def load_corpus(
    source: Any, *, strict: bool = False, cache_dir: Path | None = None, follow_links: bool = False
) -> Corpus:
    """Load a corpus: a path (.jsonl, .json, .csv, .tsv, .xlsx, .parquet, a document file or a folder of
    them), a DataFrame or a list of dicts. ``cache_dir`` holds extracted document text (default: the user
    cache, see ``composer.data.documents.cache``); ``follow_links`` reads what links in a folder point to
    out of it (skipped by default)."""
    # composer.data.documents builds Documents: imported late
    from composer.data.documents.folder import DOCUMENT_EXTENSIONS, Listing

    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.is_dir():
            return _load_folder(path, strict, cache_dir, follow_links)
        if path.suffix.lower() in DOCUMENT_EXTENSIONS and path.exists():
            check_regular(path)  # named by the user, a link is followed; a FIFO or device is refused
            return _load_files(path, Listing([(normal_id(path.name), path)]), strict, cache_dir)
    records = read_source(source)
    return Corpus([doc for _, doc in parse_rows(records, "document", "d", _document)], records.source)


def _document(row: dict[str, Any], where: Where, make_id: IdMaker) -> Document:
    fields, extra = split_fields(row, _ALIASES, where)
    text = as_text(fields.get("text"), where, "text")
    if text is None or not text.strip():
        raise where.error("missing document text", field="text")
    if (invisible := invisible_only(text)) is not None:
        raise where.error(f"document text shows nothing ({invisible})", field="text")
    return Document(
        id=as_id(fields.get("id"), where) or make_id.make(text),
        text=text,
        title=(as_text(fields.get("title"), where, "title") or "").strip(),
        metadata={**extra, **as_metadata(fields.get("metadata"), where)},
    )


def _load_folder(root: Path, strict: bool, cache_dir: Path | None, follow_links: bool) -> Corpus:
    from composer.data.documents.folder import DOCUMENT_EXTENSIONS, list_folder

    listing = list_folder(root, follow_links=follow_links)
    if not listing.files and not listing.skipped:
        raise InputError(f"no {', '.join(DOCUMENT_EXTENSIONS)} files in this folder", path=root)
    return _load_files(root, listing, strict, cache_dir)


def _load_files(root: Path, listing: Listing, strict: bool, cache_dir: Path | None) -> Corpus:
    from composer.data.documents import read_documents

    documents, tally = read_documents(root, listing.files, listing.unsupported, cache_dir,
                                       skipped=listing.skipped)
    if strict and tally.skipped:
        raise InputError(_skips(tally) + " (--strict: every file must give a document)", path=root)
    if not documents:
        raise InputError("no file here gives a document: " + _skips(tally), path=root)
    return Corpus(documents, str(root), tally=tally)


def _skips(tally: ReadTally) -> str:
    first = "; ".join(f"{doc_id}: {message}" for doc_id, _, message in tally.skipped[:3])
    more = f"; and {len(tally.skipped) - 3} more" if len(tally.skipped) > 3 else ""
    return f"{len(tally.skipped)} file(s) skipped ({first}{more})"
