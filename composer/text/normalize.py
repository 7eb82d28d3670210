"""Letter folding for Arabic, Persian and English, so that spelling variants match in search and scoring."""

from __future__ import annotations

import re
import unicodedata

# Harakat, tanwin, shadda, sukun, superscript alef, Quranic marks.
_ARABIC_DIACRITICS = re.compile(r"[\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06dc\u06df-\u06e8\u06ea-\u06ed]")
_TATWEEL = "\u0640"
ZWNJ = "\u200c"
# Soft hyphen, Arabic letter mark, zero-width and bidi controls, word joiner, BOM: never meaningful.
_INVISIBLES = re.compile(r"[\u00ad\u061c\u200b\u200d\u200e\u200f\u202a-\u202e\u2060\u2066-\u2069\ufeff]")
_WHITESPACE = re.compile(r"\s+")

_DIGITS = str.maketrans("٠١٢٣٤٥٦٧٨٩۰۱۲۳۴۵۶۷۸۹", "01234567890123456789")
# Alef forms, teh marbuta and heh with yeh above (Persian ezafe, also typed as heh + hamza above) fold alike.
_COMMON = {"أ": "ا", "إ": "ا", "آ": "ا", "ٱ": "ا", "ة": "ه", "ۀ": "ه"}
# Arabic and Persian keep their own yeh and kaf, so words typed on the other language's keyboard (ARCD has
# some) fold to them; other text leaves Persian letters alone.
_FOLDS = {
    "ar": str.maketrans({**_COMMON, "ى": "ي", "ی": "ي", "ک": "ك"}),
    "fa": str.maketrans({**_COMMON, "ي": "ی", "ى": "ی", "ك": "ک"}),
}
_OTHER_FOLD = str.maketrans({**_COMMON, "ى": "ي"})


def fold_digits(text: str) -> str:
    """Arabic-Indic and Persian digits to ASCII."""
    return text.translate(_DIGITS)


def normalize(text: str, lang: str | None = None) -> str:
    """Canonical form used for matching, tokenizing and hashing.

    NFKC, no diacritics, tatweel or invisible controls, alef/teh-marbuta/yeh folded, ASCII digits, lower case,
    one space between words. Arabic maps Persian yeh/kaf to Arabic ones, Persian (``lang="fa"``) the
    reverse; Persian also drops ZWNJ, so ``می‌روم`` and ``میروم`` match, while other languages read it as a
    space.
    ``lang=None`` detects the language per text.
    """
    if not text:
        return ""
    if lang is None:
        from composer.text.lang import detect_language

        lang = detect_language(text)
    text = unicodedata.normalize("NFKC", text)
    text = _ARABIC_DIACRITICS.sub("", text).replace(_TATWEEL, "")
    text = _INVISIBLES.sub("", text)
    text = text.translate(_FOLDS.get(lang, _OTHER_FOLD)).replace(ZWNJ, "" if lang == "fa" else " ")
    text = fold_digits(text).casefold()
    return _WHITESPACE.sub(" ", text).strip()
