"""Generation-side prompts in Arabic, Persian and English: answering, query expansion, LLM reranking.

The answer templates demand grounding in the numbered passages and a fixed refusal sentence when they do
not hold the answer; each refusal is one that ``composer.metrics.is_refusal`` recognises, so refusals are
counted (answer_refusal_rate, refusal_accuracy) instead of graded as wrong answers.
"""

from __future__ import annotations

from typing import Literal

from composer.llm.prompt import Localized, PromptLanguage, PromptTemplate

AnswerTemplate = Literal["grounded", "concise"]
"""The answer templates' names, a type so configs and search spaces reject a misspelled one at load."""

REFUSALS: dict[PromptLanguage, str] = {
    "ar": "لا أعرف: السياق المقدم لا يحتوي على الإجابة.",
    "fa": "نمی‌دانم؛ متن داده‌شده پاسخ این پرسش را ندارد.",
    "en": "I don't know: the provided context does not contain the answer.",
}

_ANSWER_USER: dict[PromptLanguage, str] = {
    "ar": "السياق:\n$contexts\n\nالسؤال: $question\nالإجابة:",
    "fa": "متن:\n$contexts\n\nپرسش: $question\nپاسخ:",
    "en": "Context:\n$contexts\n\nQuestion: $question\nAnswer:",
}

_GROUNDED: dict[PromptLanguage, str] = {
    "ar": (
        "أنت مساعد يجيب عن الأسئلة مستخدمًا المقاطع المرقّمة في السياق فقط، دون أي معرفة من خارجها. "
        "إذا لم تتضمن المقاطع ما يكفي للإجابة، فاكتب حرفيًا: «$refusal» ولا شيء غير ذلك. "
        "أجب باللغة العربية بإيجاز ودقة."
    ),
    "fa": (
        "تو دستیاری هستی که فقط با استفاده از بخش‌های شماره‌دار متن، و بدون هیچ دانسته‌ای از بیرون آن، "
        "به پرسش‌ها پاسخ می‌دهی. اگر این بخش‌ها برای پاسخ کافی نیستند، دقیقاً بنویس: «$refusal» و چیز دیگری "
        "ننویس. "
        "به فارسی، کوتاه و دقیق پاسخ بده."
    ),
    "en": (
        "You answer questions using only the numbered context passages, never outside knowledge. "
        'If the passages do not contain enough to answer, reply exactly: "$refusal" and nothing else. '
        "Answer in English, briefly and precisely."
    ),
}

_CONCISE: dict[PromptLanguage, str] = {
    "ar": (
        "أجب عن السؤال بأقصر عبارة من السياق تجيب عنه (اسم أو تاريخ أو رقم أو عبارة قصيرة) دون شرح، "
        "مستخدمًا المقاطع المرقّمة فقط. إذا لم تتضمن المقاطع الإجابة، فاكتب حرفيًا: «$refusal»"
    ),
    "fa": (
        "با کوتاه‌ترین عبارتی از متن که به پرسش پاسخ می‌دهد (یک نام، تاریخ، عدد یا عبارت کوتاه) و بدون توضیح "
        "پاسخ بده و فقط از بخش‌های شماره‌دار استفاده کن. اگر پاسخ در این بخش‌ها نیست، دقیقاً بنویس: "
        "«$refusal»"
    ),
    "en": (
        "Answer with the shortest phrase from the context that answers the question (a name, date, number or "
        "short phrase), without explanation, using only the numbered passages. If they do not contain the "
        'answer, reply exactly: "$refusal"'
    ),
}


def _answer_templates(systems: dict[PromptLanguage, str]) -> Localized:
    return {
        lang: PromptTemplate(systems[lang].replace("$refusal", REFUSALS[lang]), _ANSWER_USER[lang])
        for lang in systems
    }


ANSWER_TEMPLATES: dict[str, Localized] = {
    "grounded": _answer_templates(_GROUNDED),
    "concise": _answer_templates(_CONCISE),
}
"""Answer prompt templates by name: a search-space dimension (``generation.template``)."""

MULTI_QUERY: Localized = {
    "ar": PromptTemplate(
        "اكتب $n صيغًا مختلفة للسؤال يمكن أن تسترجع من محرك بحث المقاطع التي تجيب عنه، "
        'بنفس لغة السؤال ومعناه. أجب بكائن JSON فقط: {"queries": ["...", "..."]}',
        "السؤال: $question",
    ),
    "fa": PromptTemplate(
        "$n بازنویسی متفاوت از پرسش بنویس که بتواند از یک موتور جست‌وجو بخش‌های پاسخ‌دهنده را بیابد؛ "
        'به همان زبان و با همان معنا. فقط با یک شیء JSON پاسخ بده: {"queries": ["...", "..."]}',
        "پرسش: $question",
    ),
    "en": PromptTemplate(
        "Write $n different rephrasings of the question that would retrieve the passages answering it from a "
        'search engine, in the question\'s language and with its meaning. Reply with JSON only: {"queries": '
        '["...", "..."]}',
        "Question: $question",
    ),
}

HYDE: Localized = {
    "ar": PromptTemplate(
        "اكتب فقرة قصيرة (من جملتين إلى أربع جمل) بأسلوب الموسوعة تجيب عن السؤال باللغة العربية. "
        "تُستخدم الفقرة للبحث فقط، فلا بأس بالتفاصيل المعقولة. اكتب الفقرة وحدها.",
        "السؤال: $question",
    ),
    "fa": PromptTemplate(
        "یک بند کوتاه (دو تا چهار جمله) به سبک دانشنامه بنویس که به پرسش به فارسی پاسخ دهد. "
        "این بند فقط برای جست‌وجو به کار می‌رود، پس جزئیات محتمل اشکالی ندارد. فقط خود بند را بنویس.",
        "پرسش: $question",
    ),
    "en": PromptTemplate(
        "Write a short encyclopedia-style passage (two to four sentences) that answers the question, in the "
        "question's language. It is used only for search, so plausible details are fine. Write the passage "
        "only.",
        "Question: $question",
    ),
}

RERANK_POINTWISE: Localized = {
    "ar": PromptTemplate(
        "قيّم مدى فائدة المقطع للإجابة عن السؤال: 0 غير ذي صلة، 1 ذو صلة لكنه لا يجيب، 2 يجيب جزئيًا، "
        '3 يجيب تمامًا. أجب بكائن JSON فقط: {"score": n}',
        "السؤال: $question\n\nالمقطع:\n$passage",
    ),
    "fa": PromptTemplate(
        "میزان سودمندی بخش را برای پاسخ به پرسش ارزیابی کن: 0 نامرتبط، 1 مرتبط ولی بدون پاسخ، 2 پاسخ جزئی، "
        '3 پاسخ کامل. فقط با یک شیء JSON پاسخ بده: {"score": n}',
        "پرسش: $question\n\nبخش:\n$passage",
    ),
    "en": PromptTemplate(
        "Rate how useful the passage is to answer the question: 0 irrelevant, 1 related but no answer, "
        '2 partly answers, 3 fully answers. Reply with JSON only: {"score": n}',
        "Question: $question\n\nPassage:\n$passage",
    ),
}

RERANK_LISTWISE: Localized = {
    "ar": PromptTemplate(
        "رتّب المقاطع المرقّمة من الأكثر فائدة إلى الأقل فائدة للإجابة عن السؤال، واذكر رقم كل مقطع مرة "
        "واحدة. "
        'أجب بكائن JSON فقط: {"ranking": [3, 1, 2]}',
        "السؤال: $question\n\nالمقاطع:\n$passages",
    ),
    "fa": PromptTemplate(
        "بخش‌های شماره‌دار را از سودمندترین تا کم‌سودترین برای پاسخ به پرسش مرتب کن و شماره هر بخش را یک "
        "بار بیاور. "
        'فقط با یک شیء JSON پاسخ بده: {"ranking": [3, 1, 2]}',
        "پرسش: $question\n\nبخش‌ها:\n$passages",
    ),
    "en": PromptTemplate(
        "Rank the numbered passages from most to least useful to answer the question, naming each passage "
        'number once. Reply with JSON only: {"ranking": [3, 1, 2]}',
        "Question: $question\n\nPassages:\n$passages",
    ),
}
