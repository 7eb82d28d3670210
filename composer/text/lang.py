"""Per-text language detection for ar / fa / en, by script, letters and frequent function words."""

from __future__ import annotations

import re
from typing import Literal

Language = Literal["ar", "fa", "en", "other"]

_ARABIC_SCRIPT = re.compile(r"[\u0600-\u06ff\u0750-\u077f\ufb50-\ufdff\ufe70-\ufeff]")
_LATIN = re.compile(r"[A-Za-z]")
_END = r"(?=\s|$|[؟?.,،؛!:])"
# Evidence for each language, as (pattern, weight). Peh, tcheh, jeh and gaf never occur in Arabic words; teh
# marbuta, hamza on alef and harakat are rare in Persian. Yeh and kaf weigh little: Persian typed on an Arabic
# keyboard uses the Arabic letters and vice versa (ARCD has some), so function words may be spelt either way,
# except این: spelt اين it is Arabic for "where".
_K, _Y = "[کك]", "[یي]"
_PERSIAN_WORDS = rf"است|این|را|{_K}ه|م{_Y}|ها{_Y}|برا{_Y}|از|با|چه|{_K}جا|چند|آ{_Y}ا|{_Y}{_K}|شد|بود|شده|در"
_ARABIC_WORDS = r"ال\w{2,}|و?في|على|إلى|الى|التي|الذي|هل|ماذا|متى|كيف|عن|مع|هو|هي|أن|إن"
_PERSIAN = (
    (re.compile(r"[پچژگ]"), 2.0),
    (re.compile(r"[کی]"), 0.4),
    (re.compile(rf"(?:^|\s)(?:{_PERSIAN_WORDS}){_END}"), 2.0),
)
_ARABIC = (
    (re.compile(r"[ةأإًٌٍَُِّْ]"), 1.0),
    (re.compile(r"[يكى]"), 0.4),
    (re.compile(rf"(?:^|\s)(?:{_ARABIC_WORDS}){_END}"), 2.0),
)


def detect_language(text: str) -> Language:
    """Guess the language of one text; short texts fall back to letter evidence."""
    arabic_script = len(_ARABIC_SCRIPT.findall(text))
    latin = len(_LATIN.findall(text))
    if arabic_script == 0 and latin == 0:
        return "other"
    if latin > arabic_script:
        return "en"
    persian = sum(weight * len(pattern.findall(text)) for pattern, weight in _PERSIAN)
    arabic = sum(weight * len(pattern.findall(text)) for pattern, weight in _ARABIC)
    return "fa" if persian > arabic else "ar"
