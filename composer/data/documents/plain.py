"""Markdown and plain text: kept exactly as written (chunk offsets point into it); Markdown's headings
are found, and its first one is the title."""

from __future__ import annotations

import re

from composer.data.documents.extracted import Extracted, nest, path_name

_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")


def read_markdown(text: str, stem: str) -> Extracted:
    """Headings (ATX ``#`` and setext underlines, not inside code fences) as nested paths."""
    headings: list[tuple[int, str]] = []
    path: list[tuple[int, str]] = []
    offset, fenced, previous = 0, False, None  # previous: (offset, line) of a paragraph line
    for line in text.splitlines(keepends=True):
        bare = line.rstrip("\r\n")
        if _FENCE.match(bare):
            fenced = not fenced
        elif not fenced and (m := _ATX.match(bare)):
            path = nest(path, len(m.group(1)), m.group(2))
            headings.append((offset, path_name(path)))
        elif not fenced and previous is not None and (m := _SETEXT.match(bare)):
            level = 1 if m.group(1)[0] == "=" else 2
            path = nest(path, level, previous[1].strip())
            headings.append((previous[0], path_name(path)))
        previous = (offset, bare) if bare.strip() and not fenced else None
        offset += len(line)
    title = headings[0][1].split(" > ")[-1] if headings else stem
    return Extracted(text=text, title=title, headings=headings)


def read_plain(text: str, stem: str) -> Extracted:
    return Extracted(text=text, title=stem)
