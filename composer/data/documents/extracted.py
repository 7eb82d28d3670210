"""What a reader gives back for one file: its text and where its pages and headings start, or a skip."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

SKIP_REASONS = (
    "encrypted", "scanned", "unsupported", "empty", "unreadable", "too large",
    "outside the folder", "broken link", "link loop", "special file", "duplicate name", "duplicate folder",
    "hidden",
)
"""Why a file is skipped; the tally counts files by these. The last seven come from listing the folder:
a link whose target is outside it, a link to nothing, a link to a folder holding the link, a FIFO, device
or socket (never opened), a name equal to another's once Unicode-normalized, a folder already listed by
another path (a second link to it), a link to a hidden file or into a hidden folder."""


@dataclass
class Extracted:
    """A file's text and structure. ``pages`` and ``headings`` are ``(offset, value)`` pairs in text
    order: page ``value`` (1-based) or the heading path (``"Setup > Linux"``) starts at ``offset``."""

    text: str
    title: str = ""
    pages: list[tuple[int, int]] = field(default_factory=list)
    headings: list[tuple[int, str]] = field(default_factory=list)
    n_pages: int = 0
    repairs: Counter[str] = field(default_factory=Counter)

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "title": self.title,
            "pages": self.pages,
            "headings": self.headings,
            "n_pages": self.n_pages,
            "repairs": dict(self.repairs),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Extracted:
        return cls(
            text=data["text"],
            title=data["title"],
            pages=[(int(o), int(p)) for o, p in data["pages"]],
            headings=[(int(o), str(h)) for o, h in data["headings"]],
            n_pages=int(data["n_pages"]),
            repairs=Counter(data["repairs"]),
        )

    def metadata(self) -> dict[str, Any]:
        """What the Document keeps: the structure chunks are cut along and cite."""
        meta: dict[str, Any] = {}
        if self.pages:
            meta["pages"] = [list(p) for p in self.pages]
        if self.headings:
            meta["headings"] = [list(h) for h in self.headings]
        return meta


class Skipped(Exception):
    """A file that gives no document: ``reason`` is one of SKIP_REASONS, the message says it for a user."""

    def __init__(self, reason: str, message: str) -> None:
        assert reason in SKIP_REASONS, reason
        super().__init__(message)
        self.reason = reason
        self.message = message


def nest(path: list[tuple[int, str]], level: int, heading: str) -> list[tuple[int, str]]:
    """The heading path after a heading of ``level``: the headings above it, then it (a skipped level,
    ``#`` then ``###``, nests under the nearest higher one)."""
    return [*(p for p in path if p[0] < level), (level, heading)]


def path_name(path: list[tuple[int, str]]) -> str:
    return " > ".join(h for _, h in path)


def assemble(
    blocks: Iterable[tuple[int, str]], what: str
) -> tuple[str, list[tuple[int, str]], str, Counter[str]]:
    """Blocks (heading level, 0 for body text; text) as one repaired text, paragraphs apart: the text, its
    headings as (offset, heading path), the first heading, and the repairs by kind. A file whose blocks
    hold no text is skipped as empty (``what`` names it: "Word file")."""
    from composer.data.documents.repair import repair_text

    repairs: Counter[str] = Counter()
    text, headings, first_heading = "", [], ""
    path: list[tuple[int, str]] = []
    for level, raw in blocks:
        block = repair_text(raw, repairs).strip()
        if not block:
            continue
        if text:
            text += "\n\n"
        if level:
            path = nest(path, level, block)
            headings.append((len(text), path_name(path)))
            first_heading = first_heading or block
        text += block
    if not text:
        raise Skipped("empty", f"{what} holds no text")
    return text, headings, first_heading, repairs
