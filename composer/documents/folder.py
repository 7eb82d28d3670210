"""A folder (or one file) of documents: every file read by its format, repaired, cached, reported.

Each file is read once into memory and everything is taken from those bytes: their hash is the cache key,
so a file that changes or vanishes while it is read is either read whole or skipped, never half-cached.
A file that gives no document (encrypted, scanned, damaged, empty, too large) is one warning line and a
row of the report; the others are still read.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from composer.data.types import Document
from composer.documents.cache import DocumentCache, cache_key
from composer.documents.extracted import Extracted, Skipped
from composer.documents.html import read_html
from composer.documents.office import read_docx, read_pptx
from composer.documents.pdf import read_pdf
from composer.documents.plain import read_markdown, read_plain
from composer.documents.report import CorpusReport
from composer.unicode import decode_utf8

logger = logging.getLogger(__name__)

MAX_FILE_BYTES = 100 * 2**20
"""Files larger than this are skipped as ``too large``: a corpus document is not a 200 MB scan."""

Reader = Callable[[bytes, str], Extracted]
EXTRACTED: dict[str, Reader] = {
    ".pdf": read_pdf,
    ".docx": read_docx,
    ".pptx": read_pptx,
    ".html": read_html,
    ".htm": read_html,
}
"""Formats whose text is extracted (so cached by content hash); text formats are decoded as they are."""
TEXT: dict[str, Callable[[str, str], Extracted]] = {".md": read_markdown, ".markdown": read_markdown,
                                                    ".txt": read_plain}
DOCUMENT_EXTENSIONS = (*TEXT, *EXTRACTED)


def read_documents(
    root: Path,
    files: Sequence[tuple[str, Path]],
    unsupported: Sequence[str] = (),
    cache_dir: Path | None = None,
) -> tuple[list[Document], CorpusReport]:
    """Documents of ``files`` ((document id, path) pairs, in order) and the report of reading them."""
    report = CorpusReport(str(root))
    report.skipped += [(doc_id, "unsupported", "unsupported file type") for doc_id in unsupported]
    if unsupported:
        kinds = Counter(Path(d).suffix.lower() or "(none)" for d in unsupported)
        listed = ", ".join(f"{ext} {n}" for ext, n in sorted(kinds.items()))
        logger.warning("%s: skipped %d file(s) of unsupported types (%s)", root, len(unsupported), listed)
    cache: DocumentCache | None = None
    documents: list[Document] = []
    try:
        for doc_id, path in files:
            ext = path.suffix.lower()
            if ext in EXTRACTED and cache is None:
                cache = DocumentCache(cache_dir)
            try:
                extracted, cached = _read(path, ext, cache)
            except Skipped as skip:
                report.skipped.append((doc_id, skip.reason, skip.message))
                logger.warning("%s: skipped: %s", path, skip.message)
                continue
            report.files_read += 1
            report.from_cache += cached
            report.formats[ext] += 1
            report.pages += extracted.n_pages
            report.characters += len(extracted.text)
            report.repairs.update(extracted.repairs)
            documents.append(Document(doc_id, extracted.text, extracted.title, extracted.metadata()))
    finally:
        if cache is not None:
            cache.close()
    report.skipped.sort()
    return documents, report


def _read(path: Path, ext: str, cache: DocumentCache | None) -> tuple[Extracted, bool]:
    """The file's text and whether it came from the cache; Skipped when it gives no document."""
    data = _bytes(path)
    if ext in TEXT:
        text = decode_utf8(data, path)  # a bad byte in a text file is the user's to fix: located error
        if not text.strip():
            raise Skipped("empty", "empty file")
        return TEXT[ext](text, path.stem), False
    key = cache_key(hashlib.sha256(data).hexdigest())
    found = cache.get(key) if cache is not None else None
    if isinstance(found, Skipped):
        raise found
    if found is not None:
        return found, True
    try:
        extracted = EXTRACTED[ext](data, path.stem)
    except Skipped as skip:
        if cache is not None:
            cache.put(key, skip)
        raise
    if cache is not None:
        cache.put(key, extracted)
    return extracted, False


def _bytes(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            limit = MAX_FILE_BYTES / 2**20
            raise Skipped("too large", f"too large ({size / 2**20:.1f} MB; the limit is {limit:.0f} MB)")
        if size == 0:
            raise Skipped("empty", "empty file")
        return path.read_bytes()
    except FileNotFoundError as e:
        raise Skipped("unreadable", "the file vanished while the folder was read") from e
    except OSError as e:
        raise Skipped("unreadable", f"cannot read file: {e.strerror or e}") from e
