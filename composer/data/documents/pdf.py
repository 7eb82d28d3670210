"""PDF text per page with pypdf (BSD, pure Python); ``repair`` makes its order and letters right."""

from __future__ import annotations

import io
import logging
from collections import Counter
from typing import Any

from composer.data.documents.extracted import Extracted, Skipped
from composer.data.documents.repair import repair_pages

PAGE_SEPARATOR = "\n\n"


def read_pdf(data: bytes, stem: str) -> Extracted:
    """Pages joined by a blank line, each page's start recorded; a PDF without any text layer is
    ``scanned`` (when it holds images) or ``empty``, never an empty document."""
    from pypdf import PdfReader

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # damaged-xref chatter: the skip line says it once
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted and not _decrypt(reader):
            raise Skipped("encrypted", "password-protected PDF")
        raw = [page.extract_text() or "" for page in reader.pages]
        title = _title(reader)
        has_images = not any(p.strip() for p in raw) and any(_has_images(page) for page in reader.pages)
    except Skipped:
        raise
    except Exception as e:  # damaged PDFs make pypdf raise most kinds of error; one file never stops a folder
        raise Skipped("unreadable", f"not a readable PDF ({type(e).__name__}: {e})") from e
    if not raw:
        raise Skipped("empty", "PDF has no pages")
    if not any(p.strip() for p in raw):
        if has_images:
            message = f"scanned PDF: {len(raw)} page(s) of images without a text layer (no OCR)"
            raise Skipped("scanned", message)
        raise Skipped("empty", "PDF pages hold no text")
    repairs: Counter[str] = Counter()
    pages = repair_pages(raw, repairs)
    text, offsets = "", []
    for number, page in enumerate(pages, start=1):
        if not page:
            continue
        if text:
            text += PAGE_SEPARATOR
        offsets.append((len(text), number))
        text += page
    return Extracted(text=text, title=title or stem, pages=offsets, n_pages=len(raw), repairs=repairs)


def _decrypt(reader: Any) -> bool:
    """PDFs encrypted with an empty user password (print or copy restrictions only) open as they are."""
    from pypdf import PasswordType

    try:
        return bool(reader.decrypt("") != PasswordType.NOT_DECRYPTED)
    except Exception:  # a cipher pypdf cannot run here (no cryptography package): not readable either way
        return False


def _title(reader: Any) -> str:
    try:
        meta = reader.metadata
        return str(meta.title).strip() if meta is not None and meta.title else ""
    except Exception:  # a damaged info dictionary does not cost the text
        return ""


def _has_images(page: Any) -> bool:
    resources = page.get("/Resources")
    xobjects = resources.get_object().get("/XObject") if resources is not None else None
    if xobjects is None:
        return False
    return any(x.get_object().get("/Subtype") == "/Image" for x in xobjects.get_object().values())
