"""Office files (Word with python-docx, PowerPoint with python-pptx, both MIT): zip archives, checked first.

A .docx or .pptx is a zip of XML parts. One that would unpack to more than ``MAX_UNPACKED_BYTES``, or at a
ratio no real document has (a zip bomb renamed .docx), is refused before any part is read.
"""

from __future__ import annotations

import io
import zipfile
from collections import Counter
from typing import Any

from composer.data.documents.extracted import Extracted, Skipped, assemble
from composer.data.documents.repair import repair_text

MAX_UNPACKED_BYTES = 512 * 2**20
MAX_RATIO = 200
"""Unpacked / packed size above which an archive is taken for a zip bomb (real Office files: under 20)."""


def check_zip(data: bytes, kind: str) -> None:
    """Refuse what is not a zip, or would unpack to far too much."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise Skipped("unreadable", f"not a {kind} file (not a zip archive: {e})") from e
    if unpacked > MAX_UNPACKED_BYTES or unpacked > MAX_RATIO * max(len(data), 1):
        raise Skipped(
            "unreadable", f"refused: would unpack {len(data)} bytes to {unpacked} bytes (a zip bomb?)"
        )


def read_docx(data: bytes, stem: str) -> Extracted:
    """Paragraphs and table rows in body order; Heading/Title styles become headings, nested by level."""
    import docx

    check_zip(data, "Word")
    try:
        document = docx.Document(io.BytesIO(data))
        blocks = list(_docx_blocks(document))
        core_title = (document.core_properties.title or "").strip()
    except Exception as e:  # python-docx raises KeyError, lxml and zip errors for damaged files
        raise Skipped("unreadable", f"not a readable Word file ({type(e).__name__}: {e})") from e
    text, headings, first_heading, repairs = assemble(blocks, "Word file")
    return Extracted(text=text, title=core_title or first_heading or stem, headings=headings, repairs=repairs)


def _docx_blocks(document: Any) -> Any:
    """(heading level or 0, text) for each paragraph and table row of the body, in order."""
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    for item in document.iter_inner_content():
        if isinstance(item, Paragraph):
            yield _level(item), item.text
        elif isinstance(item, Table):
            for row in item.rows:
                cells = dict.fromkeys(cell.text.strip() for cell in row.cells)  # merged cells repeat
                yield 0, " | ".join(c for c in cells if c)


def _level(paragraph: Any) -> int:
    name = (paragraph.style.name if paragraph.style is not None else "") or ""
    if name == "Title":
        return 1
    if name.startswith("Heading"):
        digits = name.removeprefix("Heading").strip()
        return int(digits) if digits.isdigit() else 1
    return 0


def read_pptx(data: bytes, stem: str) -> Extracted:
    """One page per slide (its number cited like a PDF page); a slide's title is its heading."""
    import pptx

    check_zip(data, "PowerPoint")
    try:
        slides = []
        for slide in pptx.Presentation(io.BytesIO(data)).slides:
            title_shape = slide.shapes.title
            has_title = title_shape is not None and title_shape.has_text_frame
            title = title_shape.text_frame.text if has_title else ""
            body = [s.text_frame.text for s in slide.shapes if s.has_text_frame and s is not title_shape]
            slides.append((title, body))
    except Exception as e:  # python-pptx raises KeyError, lxml and zip errors for damaged files
        raise Skipped("unreadable", f"not a readable PowerPoint file ({type(e).__name__}: {e})") from e
    repairs: Counter[str] = Counter()
    text, pages, headings = "", [], []
    for number, (title, body) in enumerate(slides, start=1):
        parts = [p for p in (repair_text(x, repairs).strip() for x in [title, *body]) if p]
        if not parts:
            continue
        if text:
            text += "\n\n"
        pages.append((len(text), number))
        if title.strip():
            headings.append((len(text), parts[0]))
        text += "\n\n".join(parts)
    if not text:
        raise Skipped("empty", "PowerPoint file holds no text")
    first = headings[0][1] if headings else stem
    return Extracted(
        text=text, title=first, pages=pages, headings=headings, n_pages=len(slides), repairs=repairs
    )
