"""Arabic and Persian text repair on extraction, counted by kind for the folder's tally.

PDF extractors give Arabic script as it was drawn, not as it was typed: presentation forms (U+FB50–U+FDFF,
U+FE70–U+FEFC) instead of letters, lam-alef as one ligature, lines in visual order (letters and words
reversed), bidi controls and tatweel, the page's running header and footer, and paragraphs cut into lines.
A retrieval study over such text measures the extractor, so every extracted text is repaired here:

- ``visual_order``: lines read right to left are reversed to logical order (runs of Latin letters and digits
  keep their own order, brackets are mirrored back). A page is in visual order when its words look
  reversed: presentation forms tell it exactly (a word starts with a final form), base letters by
  evidence counted both ways (``ال`` starting words, ``ة``/``ى`` ending them, function words).
- ``presentation_forms`` and ``lam_alef``: folded to base letters by NFKC (after the order is known, since a
  ligature decomposes in logical order).
- ``bidi_controls`` and ``tatweel``: removed.
- ``headers_footers``: a first or last line repeated (digits aside) on most pages of a 3+ page file is
  dropped.
- ``hyphenation`` and ``line_breaks``: a word cut by a hyphen is joined, a line that does not end a
  sentence is joined to the next one with a space.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

from composer.text.stopwords import STOPWORDS

_FORM_RANGES = ((0xFB50, 0xFDFF), (0xFE70, 0xFEFC))
_LAM_ALEF = range(0xFEF5, 0xFEFD)


def _form_table() -> dict[int, str]:
    table: dict[int, str] = {}
    for low, high in _FORM_RANGES:
        for cp in range(low, high + 1):
            folded = unicodedata.normalize("NFKC", chr(cp))
            if folded != chr(cp):
                # Isolated harakat (U+FE70...) fold to space + mark: keep the mark only.
                table[cp] = folded.lstrip(" ") or folded
    return table


_FOLD = _form_table()
_POSITIONS = ("<initial>", "<medial>", "<final>", "<isolated>")
_FORM_OF = {
    chr(cp): tag.strip("<>")
    for cp in _FOLD
    if (tag := unicodedata.decomposition(chr(cp)).split(" ")[0]) in _POSITIONS
}
_FORMS = re.compile("[\ufb50-\ufdff\ufe70-\ufefc]")
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]")
_TATWEEL = "\u0640"
_ARABIC_WORD = re.compile("[\u0600-\u06ff\u0750-\u077f\ufb50-\ufdff\ufe70-\ufefc]+")
_ARABIC_LETTER = re.compile(
    "[\u0620-\u064a\u0660-\u0669\u066e-\u06d3\u06f0-\u06f9\ufb50-\ufdff\ufe70-\ufefc]"
)
_LATIN_LETTER = re.compile("[A-Za-z]")
# What keeps its own left-to-right order inside a right-to-left line: Latin words and numbers, with the
# spaces and punctuation between them.
_LTR_CHAR = r"A-Za-z0-9\u0660-\u0669\u06f0-\u06f9"
_LTR_RUN = re.compile(rf"[{_LTR_CHAR}](?:[{_LTR_CHAR}.,:/%+\- ]*[{_LTR_CHAR}])?")
_MIRROR = str.maketrans("()[]{}<>«»", ")(][}{><»«")
_FUNCTION_WORDS = frozenset(w for lang in ("ar", "fa") for w in STOPWORDS[lang] if len(w) >= 2)
_SENTENCE_END = tuple(".!?؟:؛;…»\")")
_DIGITS = re.compile(r"[0-9\u0660-\u0669\u06f0-\u06f9]+")


def repair_text(text: str, repairs: Counter[str]) -> str:
    """Character repairs for text whose order is known to be logical (Word, HTML, slides)."""
    text = _strip(text, repairs)
    return _fold(text, repairs)


def repair_pages(pages: Sequence[str], repairs: Counter[str]) -> list[str]:
    """Every repair, for a PDF's pages in order; the result has one text per page (maybe empty)."""
    lined = []
    for page in pages:
        lines = [line.strip() for line in _strip(page, repairs).split("\n")]
        if _order_score(lines) < 0:
            for i, line in enumerate(lines):
                if _right_to_left(line):
                    lines[i] = _reverse(line)
                    repairs["visual_order"] += 1
        lined.append([_fold(line, repairs) for line in lines])
    _drop_running_lines(lined, repairs)
    return [_join_lines(lines, repairs) for lines in lined]


def _strip(text: str, repairs: Counter[str]) -> str:
    text, n = _BIDI.subn("", text)
    if n:
        repairs["bidi_controls"] += n
    if _TATWEEL in text:
        repairs["tatweel"] += text.count(_TATWEEL)
        text = text.replace(_TATWEEL, "")
    return text


def _fold(text: str, repairs: Counter[str]) -> str:
    if not _FORMS.search(text):
        return text
    for ch in _FORMS.findall(text):
        repairs["lam_alef" if ord(ch) in _LAM_ALEF else "presentation_forms"] += 1
    return text.translate(_FOLD)


def _order_score(lines: Sequence[str]) -> int:
    """Evidence that the lines are in logical order (positive) or visual order (negative)."""
    score = 0
    for line in lines:
        for word in _ARABIC_WORD.findall(line):
            if len(word) < 2:
                continue
            first, last = _FORM_OF.get(word[0]), _FORM_OF.get(word[-1])
            score += (first == "initial") + (last == "final") - (first == "final") - (last == "initial")
            base = word.translate(_FOLD)
            if len(base) > 3:
                score += base.startswith("ال") - base.endswith("لا")
            score += (base[-1] in "ةى") - (base[0] in "ةى")
            function_word = base in _FUNCTION_WORDS
            score += function_word - (not function_word and base[::-1] in _FUNCTION_WORDS)
    return score


def _right_to_left(line: str) -> bool:
    return len(_ARABIC_LETTER.findall(line)) > len(_LATIN_LETTER.findall(line))


def _reverse(line: str) -> str:
    """A visual-order line in logical order: reversed, brackets mirrored, Latin and number runs kept."""
    flipped = line[::-1].translate(_MIRROR)
    return _LTR_RUN.sub(lambda m: m.group()[::-1].translate(_MIRROR), flipped)


def _drop_running_lines(pages: list[list[str]], repairs: Counter[str]) -> None:
    """Drop a page's first and last non-empty lines where the same line (digits aside: page numbers)
    starts or ends most pages: the running header and footer."""
    if len(pages) < 3:
        return
    for position in (0, -1):
        ends = [_edge(lines, position) for lines in pages]
        edges = [(lines, i) for lines, i in zip(pages, ends, strict=True) if i is not None]
        counts = Counter(_DIGITS.sub("#", lines[i]) for lines, i in edges)
        repeated = {line for line, n in counts.items() if n >= max(2, 0.6 * len(pages))}
        for lines, i in edges:
            if _DIGITS.sub("#", lines[i]) in repeated:
                lines[i] = ""
                repairs["headers_footers"] += 1


def _edge(lines: list[str], position: int) -> int | None:
    order = range(len(lines)) if position == 0 else range(len(lines) - 1, -1, -1)
    return next((i for i in order if lines[i]), None)


def _join_lines(lines: list[str], repairs: Counter[str]) -> str:
    """One paragraph per run of lines: a hyphenated word is joined, a line not ending a sentence runs on."""
    out = ""
    for line in lines:
        if not line:
            if out and not out.endswith("\n\n"):
                out = out.rstrip("\n") + "\n\n"
            continue
        if not out or out.endswith("\n"):
            out += line
        elif out[-1] == "-" and len(out) > 1 and out[-2].isalpha() and line[0].islower():
            out = out[:-1] + line
            repairs["hyphenation"] += 1
        elif out.endswith(_SENTENCE_END):
            out += "\n" + line
        else:
            out += " " + line
            repairs["line_breaks"] += 1
    return out.strip()
