"""Refusal detection for Arabic, Persian and English answers: a refusal is counted, never graded as wrong.

Phrasings are written in plain script and folded like the answers (``textmatch.fold``), so spelling variants
(أعرف / اعرف, ي / ی, نمی‌دانم / نمیدانم) match. They name the speaker ("I don't know") or the context
("the text does not mention"), because bare negations ("لا يوجد", "وجود ندارد", "does not contain") are also
how factual answers are phrased.
"""

from __future__ import annotations

import re

from composer.metrics.textmatch import fold

_AR_SOURCES = (
    "النص|النصوص|السياق|الفقرة|الفقرات|المقطع|المقاطع|المصدر|المصادر|الوثيقة|الوثائق|المستند|المستندات"
    "|المعلومات المتاحة|المعلومات المقدمة|المعلومات المتوفرة|المعلومات المعطاة"
)
_AR_NOT_SAY = (
    "(?:لا|لم) (?:يحتوي|تحتوي|يتضمن|تتضمن|يذكر|تذكر|يوفر|توفر|يقدم|تقدم|يشير|تشير|يشر|تشر|يرد|ترد|يوضح|توضح)"
)
_FA_SOURCES = "متن|متون|زمینه|بافت|سند|اسناد|منبع|منابع|پاراگراف|بند|اطلاعات داده شده|اطلاعات ارائه شده"
_FA_NOT_SAID = (
    "ذکر نشده|نیامده|وجود ندارد|نیست|اشاره نشده|اشاره ?ای نشده|موجود نیست|یافت نشد|مشخص نشده|گفته نشده"
)
_EN_SOURCES = r"(?:context|text|passages?|documents?|sources?|excerpts?|information)"

# " … " stands for up to six words in between.
_PHRASES = (
    # English
    r"i (?:don't|do not) know",
    r"i(?: cannot| can't| am unable to|'m unable to| am not able to) (?:answer|determine|find|tell)",
    r"(?:cannot|can't|could not|couldn't) be (?:answered|determined)",
    rf"(?:the|this|these)(?: provided| given| retrieved)? {_EN_SOURCES}(?: provided| given)?"
    r" (?:does not|doesn't|do not|don't|did not) (?:contain|mention|include|provide|specify|say|state|give"
    r"|discuss|address|cover)",
    r"(?:not|never) (?:mentioned|provided|specified|stated|given|found|included)"
    rf" in the (?:provided )?{_EN_SOURCES}",
    r"(?:there is|there's) no (?:information|mention)",
    r"(?:insufficient|not enough) (?:information|context)",
    # Arabic
    "لا (?:أعرف|أعلم|أدري)",
    "لا (?:أستطيع|يمكنني|يمكن|أتمكن من) (?:الإجابة|الرد|تحديد|معرفة)",
    "(?:يتعذر|تعذر) (?:الإجابة|تحديد)",
    "لا (?:تتوفر|تتوافر|توجد|يوجد|يتوفر)(?: لدي)? (?:معلومات|معلومة|إشارة|ذكر|بيانات)",
    "لا أملك (?:معلومات|إجابة)",
    "لم (?:أجد|أعثر)",
    f"{_AR_NOT_SAY} (?:{_AR_SOURCES})",
    f"(?:{_AR_SOURCES})(?: [^ ]+){{0,2}} {_AR_NOT_SAY}",
    "(?:لا يوجد|لا توجد|ليس|ليست|غير (?:مذكور|مذكورة|متوفر|متوفرة|موجود|موجودة)"
    f"|لم (?:يرد|ترد|يذكر|تذكر|يتم ذكر))(?: [^ ]+){{0,3}} في (?:{_AR_SOURCES})",
    # Persian
    "نمی ?دانم",
    "اطلاعی (?:ندارم|در دست نیست|وجود ندارد)",
    "اطلاعاتی … (?:وجود ندارد|ندارم|موجود نیست|در دسترس نیست|یافت نشد|ارائه نشده|نیامده)",
    f"(?:در|از) (?:{_FA_SOURCES}) … (?:{_FA_NOT_SAID})",
    f"(?:در|از) (?:{_FA_SOURCES}) (?:{_FA_NOT_SAID})",
    f"(?:{_FA_SOURCES}) … (?:اطلاعاتی|اطلاعی|پاسخی|اشاره ?ای) … (?:ندارد|نمی ?دهد|نشده)",
    "نمی ?توانم(?: [^ ]+){0,4} (?:پاسخ|جواب)",
    "قادر به (?:پاسخ|پاسخگویی|یافتن)(?: [^ ]+){0,4} (?:نیستم|نبودم)",
)
_GAP = r"(?: [^ ]+){0,6} "


def _compile(phrase: str) -> str:
    """Fold a phrasing like the text it is matched against.

    ASCII regex syntax passes through, except upper-case escapes (``\\S``), which casefolding would flip.
    """
    return _GAP.join(fold(part).replace("'", "['’]?") for part in phrase.split(" … "))


_REFUSAL = re.compile(r"(?<!\w)(?:" + "|".join(_compile(p) for p in _PHRASES) + r")(?!\w)")


def is_refusal(answer: str) -> bool:
    """Whether the answer declines to answer ("I don't know", "لا يحتوي النص على...", "در متن نیامده")."""
    return bool(_REFUSAL.search(fold(answer)))
