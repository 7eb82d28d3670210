"""Finding an answer in its passage the way Arabic and Persian need, with exact offsets in the original.

Both texts are folded character by character with ``composer.text.normalize`` (diacritics and tatweel
dropped, alef/yeh/kaf/teh-marbuta folded, digits to ASCII, case folded, whitespace runs as one space), and
each folded character remembers the original character it came from; a match in the folded passage maps
back to ``passage[start:end]``, so the gold span is the passage's own spelling, harakat included.
"""

from __future__ import annotations

from functools import lru_cache

from composer.text.normalize import ZWNJ, normalize

_EDGE_PUNCT = " \t\n.,،;؛:!?؟\"'«»“”()[]{}-–—…"


@lru_cache(maxsize=8192)
def _fold_char(ch: str, lang: str) -> str:
    if ch.isspace() or (ch == ZWNJ and lang != "fa"):
        return " "
    return normalize(ch, lang)


def fold_with_offsets(text: str, lang: str) -> tuple[str, list[int]]:
    """The folded text and, for each of its characters, the index of the original character."""
    chars: list[str] = []
    offsets: list[int] = []
    for i, ch in enumerate(text):
        folded = _fold_char(ch, lang)
        if folded == " " and (not chars or chars[-1] == " "):
            continue
        for f in folded:
            chars.append(f)
            offsets.append(i)
    while chars and chars[-1] == " ":
        chars.pop()
        offsets.pop()
    return "".join(chars), offsets


def _boundary(folded: str, start: int, end: int) -> bool:
    """Whether the match starts and ends at word edges (Arabic clitics aside, the better match)."""
    return (start == 0 or not folded[start - 1].isalnum()) and (
        end == len(folded) or not folded[end].isalnum()
    )


def _inside_number(folded: str, needle: str, start: int, end: int) -> bool:
    """``14`` must not match inside ``1400``."""
    return (needle[0].isdigit() and start > 0 and folded[start - 1].isdigit()) or (
        needle[-1].isdigit() and end < len(folded) and folded[end].isdigit()
    )


def find_span(passage: str, answer: str, lang: str) -> tuple[int, int] | None:
    """(start, end) of ``answer`` in ``passage`` (original offsets), or None when it is not there.

    The first match at word edges wins, else the first one inside a word (an Arabic clitic: the answer
    ``كتاب`` in ``والكتاب``); punctuation around the answer is ignored.
    """
    needle, _ = fold_with_offsets(answer.strip(_EDGE_PUNCT), lang)
    if not needle:
        return None
    folded, offsets = fold_with_offsets(passage, lang)
    found: tuple[int, int] | None = None
    at = folded.find(needle)
    while at >= 0:
        end = at + len(needle)
        if not _inside_number(folded, needle, at, end):
            if _boundary(folded, at, end):
                found = (at, end)
                break
            found = found or (at, end)
        at = folded.find(needle, at + 1)
    if found is None:
        return None
    start, stop = offsets[found[0]], offsets[found[1] - 1] + 1
    # A folded character may stand for a base letter followed by dropped marks: keep them in the span.
    while stop < len(passage) and _fold_char(passage[stop], lang) == "":
        stop += 1
    return start, stop
