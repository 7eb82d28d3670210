"""A folder (or one file) of documents: every file read by its format, repaired, cached, tallied.

Each file is read once into memory and everything is taken from those bytes: their hash is the cache key,
so a file that changes or vanishes while it is read is either read whole or skipped, never half-cached.
A file that gives no document (encrypted, scanned, damaged, empty, too large) is one warning line and a
row of the tally; the others are still read.

Listing a folder follows links whose target is inside it (a link to a folder that holds the link is a
loop, skipped; a folder reached again by another link is skipped, so each file is read once; a link to a
hidden file or into a hidden folder is skipped, as they are). A link out of the folder
(``notes.md -> /etc/passwd``) is skipped unless ``follow_links``: what it points to would be indexed, put in
LLM prompts and traced. A FIFO, device or socket is never opened (a FIFO blocks), a broken link is
reported: each is a row of the tally, so ``strict`` fails on it.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import stat
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from composer.data.documents.cache import DocumentCache, cache_key
from composer.data.documents.extracted import Extracted, Skipped
from composer.data.documents.html import read_html
from composer.data.documents.office import read_docx, read_pptx
from composer.data.documents.pdf import read_pdf
from composer.data.documents.plain import read_markdown, read_plain
from composer.data.documents.tally import ReadTally
from composer.data.fields import normal_id
from composer.data.types import Document
from composer.errors import InputError
from composer.files import not_regular, open_regular
from composer.unicode import decode_utf8, invisible_only

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

SkipRow = tuple[str, str, str]
"""(document id, reason, message): one row of ``ReadTally.skipped``."""


@dataclass
class Listing:
    """What a folder holds, by document id (its path below the folder, POSIX, NFC), in path order."""

    files: list[tuple[str, Path]] = field(default_factory=list)
    """Documents to read."""
    unsupported: list[str] = field(default_factory=list)
    """Regular files of other types."""
    skipped: list[SkipRow] = field(default_factory=list)
    """Entries never opened: links out of the folder or to hidden files, broken links, loops, folders reached
    twice, FIFOs and devices."""


def list_folder(root: Path, *, follow_links: bool = False) -> Listing:
    """Everything below ``root`` but hidden files and folders (see the module docstring for links). Ids are
    NFC, so a folder written on macOS (NFD names) has the ids its question set types."""
    listing = Listing()
    _walk(root, None, root, (Path(os.path.realpath(root)),), follow_links, listing, {}, {})
    listing.files.sort()
    listing.unsupported.sort()
    listing.skipped.sort()
    return listing


def _walk(
    folder: Path,
    folder_id: str | None,
    root: Path,
    ancestors: tuple[Path, ...],
    follow_links: bool,
    listing: Listing,
    seen: dict[str, str],
    walked: dict[tuple[int, int], str],
) -> None:
    """Lists ``folder`` (``folder_id`` below ``root``, None for the root) into ``listing``. ``ancestors`` are
    the real paths of the folders walked down to it, the root's first (a link to one of them is a loop);
    ``seen`` maps the ids given so far to the names that gave them, ``walked`` the folders listed so far
    (device, inode) to their ids: two links to one folder, or a chain of folders each holding two links to
    the next (2**n paths), list each folder once. Real folders are listed before links, so a folder beside
    a link to it keeps its own ids."""
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: (e.is_symlink(), e.name))
    except OSError as e:
        if folder_id is None:
            raise InputError(f"cannot read folder: {e.strerror or e}", path=root) from e
        listing.skipped.append((folder_id, "unreadable", f"cannot read folder: {e.strerror or e}"))
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue
        name = Path(entry.path).relative_to(root).as_posix()
        doc_id = normal_id(name)
        if doc_id in seen:
            message = f"the same name as {seen[doc_id]} once Unicode-normalized (NFC)"
            listing.skipped.append((doc_id, "duplicate name", message))
            continue
        seen[doc_id] = name
        try:
            info, real = _examine(entry, ancestors, follow_links)
        except Skipped as skip:
            listing.skipped.append((doc_id, skip.reason, skip.message))
            continue
        except OSError as e:  # it vanished since the listing, or cannot be examined
            listing.skipped.append((doc_id, "unreadable", f"cannot read: {e.strerror or e}"))
            continue
        if stat.S_ISDIR(info.st_mode):
            if real in ancestors:
                listing.skipped.append((doc_id, "link loop", f"a link to {real}, a folder that holds it"))
            elif (first := walked.get((info.st_dev, info.st_ino))) is not None:
                listing.skipped.append((doc_id, "duplicate folder", f"{real}, already read as {first}"))
            else:
                walked[info.st_dev, info.st_ino] = doc_id
                _walk(Path(entry.path), doc_id, root, (*ancestors, real), follow_links, listing, seen, walked)
        elif (kind := not_regular(info.st_mode)) is not None:
            listing.skipped.append((doc_id, "special file", f"{kind}, not a regular file: never opened"))
        elif Path(entry.name).suffix.lower() in DOCUMENT_EXTENSIONS:
            listing.files.append((doc_id, Path(entry.path)))
        else:
            listing.unsupported.append(doc_id)


def _examine(
    entry: os.DirEntry[str], ancestors: tuple[Path, ...], follow_links: bool
) -> tuple[os.stat_result, Path]:
    """(stat, real path) of what ``entry`` is, a link followed; Skipped for a link that leads nowhere, to
    itself, to a hidden file or folder of the root, or (unless ``follow_links``) out of the folder."""
    if not entry.is_symlink():
        return entry.stat(follow_symlinks=False), ancestors[-1] / entry.name
    target = os.readlink(entry.path)
    try:
        info = os.stat(entry.path)
    except FileNotFoundError:
        raise Skipped("broken link", f"a link to {target}, which does not exist") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Skipped("link loop", f"a link to {target}, which leads back to itself") from None
        raise
    real = Path(os.path.realpath(entry.path))
    if not follow_links and not real.is_relative_to(ancestors[0]):
        raise Skipped("outside the folder", f"a link to {real}, outside the folder: not read (to read "
                      "what links out of the folder: --follow-links, or follow_links=True)")
    inside = real.relative_to(ancestors[0]).parts if real.is_relative_to(ancestors[0]) else ()
    if any(part.startswith(".") for part in inside):
        raise Skipped("hidden", f"a link to {real}, hidden (a name starting with '.'): not read, as hidden "
                      "files are not")
    return info, real


def read_documents(
    root: Path,
    files: Sequence[tuple[str, Path]],
    unsupported: Sequence[str] = (),
    cache_dir: Path | None = None,
    *,
    skipped: Sequence[SkipRow] = (),
) -> tuple[list[Document], ReadTally]:
    """Documents of ``files`` ((document id, path) pairs, in order) and the tally of reading them, which
    also lists ``unsupported`` files and entries ``skipped`` when the folder was listed (one warning each)."""
    tally = ReadTally(str(root))
    tally.skipped += [(doc_id, "unsupported", "unsupported file type") for doc_id in unsupported]
    if unsupported:
        kinds = Counter(Path(d).suffix.lower() or "(none)" for d in unsupported)
        listed = ", ".join(f"{ext} {n}" for ext, n in sorted(kinds.items()))
        logger.warning("%s: skipped %d file(s) of unsupported types (%s)", root, len(unsupported), listed)
    for doc_id, reason, message in skipped:
        tally.skipped.append((doc_id, reason, message))
        logger.warning("%s: skipped: %s", root / doc_id, message)
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
                tally.skipped.append((doc_id, skip.reason, skip.message))
                logger.warning("%s: skipped: %s", path, skip.message)
                continue
            tally.files_read += 1
            tally.from_cache += cached
            tally.formats[ext] += 1
            tally.pages += extracted.n_pages
            tally.characters += len(extracted.text)
            tally.repairs.update(extracted.repairs)
            documents.append(Document(doc_id, extracted.text, extracted.title, extracted.metadata()))
    finally:
        if cache is not None:
            cache.close()
    tally.skipped.sort()
    return documents, tally


def _read(path: Path, ext: str, cache: DocumentCache | None) -> tuple[Extracted, bool]:
    """The file's text and whether it came from the cache; Skipped when it gives no document, also when
    its text shows nothing (only zero-width characters and direction marks: it would index as nothing)."""
    extracted, cached = _extract(path, ext, cache)
    if (invisible := invisible_only(extracted.text)) is not None:
        raise Skipped("empty", f"the text shows nothing ({invisible})")
    return extracted, cached


def _extract(path: Path, ext: str, cache: DocumentCache | None) -> tuple[Extracted, bool]:
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
    """The file's bytes, read from one open file checked regular (a file swapped for a FIFO since the listing
    does not block) and at most ``MAX_FILE_BYTES + 1`` of them (a file that grows, or a device, does not
    fill memory)."""
    try:
        info = path.stat()
        if (kind := not_regular(info.st_mode)) is not None:  # it changed since the listing: never open it
            raise Skipped("special file", f"{kind}, not a regular file: never opened")
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            data = f.read(MAX_FILE_BYTES + 1) if size <= MAX_FILE_BYTES else b""
        size = max(size, len(data))
        if size > MAX_FILE_BYTES:
            limit = MAX_FILE_BYTES / 2**20
            raise Skipped("too large", f"too large ({size / 2**20:.1f} MB; the limit is {limit:.0f} MB)")
        if size == 0:
            raise Skipped("empty", "empty file")
        return data
    except InputError as e:  # it changed (vanished, or became a FIFO) between the check above and the open
        if not os.path.lexists(path):
            raise Skipped("unreadable", "the file vanished while the folder was read") from e
        raise Skipped("unreadable", f"it changed while the folder was read: {e.message}") from e
    except FileNotFoundError as e:
        raise Skipped("unreadable", "the file vanished while the folder was read") from e
    except OSError as e:
        raise Skipped("unreadable", f"cannot read file: {e.strerror or e}") from e
