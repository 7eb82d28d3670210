"""HTML pages with BeautifulSoup (MIT) on lxml: the page's own content, without navigation chrome."""

from __future__ import annotations

import re
from typing import Any

from composer.data.documents.extracted import Extracted, Skipped, assemble

CHROME = ("script", "style", "noscript", "template", "svg", "nav", "header", "footer", "aside", "form",
          "button", "iframe")
"""Elements that are the site, not the page: menus, banners, footers, sidebars, forms, scripts."""
_CHROME_ROLES = '[role="navigation"], [role="banner"], [role="contentinfo"], [aria-hidden="true"]'
_BLOCKS = ("h1", "h2", "h3", "h4", "h5", "h6", "p", "li", "pre", "blockquote", "dt", "dd", "tr",
           "figcaption", "caption")
_HEADINGS = {f"h{i}": i for i in range(1, 7)}
_SPACE = re.compile(r"\s+")


def read_html(data: bytes, stem: str) -> Extracted:
    """Block elements of ``<main>`` (else ``<article>``, else ``<body>``) as paragraphs; h1–h6 headings.

    The charset comes from the page (BOM, ``<meta charset>``), else a guess, as browsers do.
    """
    from bs4 import BeautifulSoup

    try:
        soup = BeautifulSoup(data, "lxml")
    except Exception as e:  # lxml refuses very few inputs, but a reader never stops the folder
        raise Skipped("unreadable", f"not a readable HTML page ({type(e).__name__}: {e})") from e
    page_title = _clean(soup.title.get_text()) if soup.title is not None else ""
    for tag in soup.find_all(CHROME):
        tag.decompose()
    for tag in soup.select(_CHROME_ROLES):
        tag.decompose()
    root = soup.find("main") or soup.find("article") or soup.body or soup
    text, headings, first, repairs = assemble(_blocks(root), "HTML page")
    return Extracted(text=text, title=page_title or first or stem, headings=headings, repairs=repairs)


def _blocks(root: Any) -> Any:
    """(heading level or 0, text) of the outermost block elements, in document order; a page without any
    gives its whole text as one block."""
    found = False
    for tag in root.find_all(_BLOCKS):
        if tag.find_parent(_BLOCKS) is not None:
            continue
        found = True
        if tag.name == "tr":
            cells = [_clean(c.get_text(" ")) for c in tag.find_all(["td", "th"])]
            yield 0, " | ".join(c for c in cells if c)
        else:
            yield _HEADINGS.get(tag.name, 0), _clean(tag.get_text(" "))
    if not found:
        yield 0, _clean(root.get_text(" "))


def _clean(text: str) -> str:
    return _SPACE.sub(" ", text).strip()
