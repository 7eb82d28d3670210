"""Answer prompts in Arabic, Persian and English: the grounded and concise templates and the refusals.

The answer templates demand grounding in the numbered passages and a fixed refusal sentence when they do
not hold the answer; each refusal is one that ``composer.metrics.is_refusal`` recognises, so refusals are
counted (answer_refusal_rate, refusal_accuracy) instead of graded as wrong answers. A follow-up's prompt
shows the conversation so far, fenced as data like the passages, before the question it leans on.
"""

from __future__ import annotations

from typing import Literal

from composer.llm.prompt import Localized, PromptLanguage, PromptTemplate, fenced

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

_CONVERSATION_USER: dict[PromptLanguage, str] = {
    "ar": "السياق:\n$contexts\n\nالمحادثة حتى الآن:\n$conversation\n\nالسؤال: $question\nالإجابة:",
    "fa": "متن:\n$contexts\n\nگفت‌وگو تا اینجا:\n$conversation\n\nپرسش: $question\nپاسخ:",
    "en": "Context:\n$contexts\n\nConversation so far:\n$conversation\n\nQuestion: $question\nAnswer:",
}
"""A follow-up's user message. The field is ``conversation``: ``history`` is kept for users' templates."""

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


def _answer_templates(systems: dict[PromptLanguage, str], users: dict[PromptLanguage, str]) -> Localized:
    """The templates of ``systems``, their passages, conversation and question fenced as untrusted data."""
    return fenced(
        {
            lang: PromptTemplate(systems[lang].replace("$refusal", REFUSALS[lang]), users[lang])
            for lang in systems
        },
        "contexts",
        "conversation",
        "question",
    )


ANSWER_TEMPLATES: dict[str, Localized] = {
    "grounded": _answer_templates(_GROUNDED, _ANSWER_USER),
    "concise": _answer_templates(_CONCISE, _ANSWER_USER),
}
"""Answer prompt templates by name: a search-space dimension (``generation.template``)."""

FOLLOW_UP_TEMPLATES: dict[str, Localized] = {
    "grounded": _answer_templates(_GROUNDED, _CONVERSATION_USER),
    "concise": _answer_templates(_CONCISE, _CONVERSATION_USER),
}
"""The same templates for a question with history: the conversation so far before the question."""
