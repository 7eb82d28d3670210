"""What a judge may be told beyond its metric's prompt: a prompt variant (how strict to be) and few-shot
examples of verdicts people gave, in the answer's language; ``composer judges tune`` searches over both.

The variant is one sentence added to the system message. The examples open the user message, each one's
question, answer, reference and passages fenced as untrusted data like the material being judged, with
the human verdict after it: a judge calibrated on them, never instructed by them. Only the call that gives
the verdict is guided; splitting an answer into statements is not a judgment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from composer.llm.prompt import PromptLanguage, fence

PromptVariant = Literal["default", "strict", "lenient"]
PROMPT_VARIANTS: tuple[PromptVariant, ...] = ("default", "strict", "lenient")

RATED = ("llm_judge_rating",)
"""Metrics whose verdicts (and so whose examples' labels) are 1-5 ratings."""
EXAMPLE_CONTEXT_CHARS = 600
"""An example's passages are cut to this many characters: they show a verdict, not a whole retrieval."""

_VARIANTS: dict[PromptVariant, dict[PromptLanguage, str]] = {
    "default": {"ar": "", "fa": "", "en": ""},
    "strict": {
        "ar": "كن صارمًا: لا تعدّ شيئًا مدعومًا أو صحيحًا إلا إذا ذُكر صراحة، وعند الشك احكم ضده.",
        "fa": "سخت‌گیر باش: چیزی را فقط وقتی تأییدشده یا درست بدان که صریحاً بیان شده باشد و در صورت تردید "
        "علیه آن داوری کن.",
        "en": "Be strict: count something as supported or correct only when it is stated explicitly; when "
        "in doubt, judge against it.",
    },
    "lenient": {
        "ar": "كن متساهلًا: إعادة الصياغة والحقائق التي يدل عليها النص بوضوح والتفاصيل الزائدة غير الضارة تُعدّ "
        "مدعومة أو صحيحة، ولا تحكم ضد شيء إلا لخطأ واضح أو نقص واضح.",
        "fa": "آسان‌گیر باش: بازنویسی‌ها، واقعیت‌هایی که متن به‌روشنی می‌رساند و جزئیات اضافی بی‌ضرر، تأییدشده "
        "یا درست به شمار می‌آیند و فقط برای خطا یا کمبود آشکار علیه چیزی داوری کن.",
        "en": "Be lenient: paraphrases, facts the text clearly implies and harmless extra detail count as "
        "supported or correct; judge against something only for a clear error or a clear gap.",
    },
}

_WORDS: dict[PromptLanguage, dict[str, str]] = {
    "ar": {
        "header": "أحكام أعطاها أشخاص على إجابات أخرى، لتعاير بها حكمك (احكم فقط على المادة التي تليها):",
        "question": "السؤال",
        "answer": "الإجابة",
        "reference": "الإجابة المرجعية",
        "contexts": "السياق",
        "verdict": "الحكم البشري",
        "pass": "مقبولة",
        "fail": "مرفوضة",
        "why": "السبب",
    },
    "fa": {
        "header": "داوری‌هایی که افراد درباره پاسخ‌های دیگر داده‌اند، برای هم‌سنجی داوری تو (فقط مطالب پس از "
        "آن‌ها را داوری کن):",
        "question": "پرسش",
        "answer": "پاسخ",
        "reference": "پاسخ مرجع",
        "contexts": "متن",
        "verdict": "داوری انسانی",
        "pass": "قبول",
        "fail": "رد",
        "why": "دلیل",
    },
    "en": {
        "header": "Verdicts people gave on other answers, to calibrate yours (judge only the material that "
        "follows them):",
        "question": "Question",
        "answer": "Answer",
        "reference": "Reference answer",
        "contexts": "Context",
        "verdict": "Human verdict",
        "pass": "pass",
        "fail": "fail",
        "why": "why",
    },
}


class JudgeExample(BaseModel):
    """One labelled answer shown to the judge: a human verdict (0/1, or a 1-5 rating) on ``metric``, used
    for questions in ``lang``. ``id`` is the label's, so that a search can prove it never scored a judge
    on an answer the judge was shown."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: str
    lang: PromptLanguage
    question: str
    answer: str
    contexts: tuple[str, ...] = ()
    reference_answer: str | None = None
    label: int
    rationale: str | None = None
    id: str | None = None


def guide(
    messages: list[dict[str, str]],
    metric: str,
    lang: PromptLanguage,
    variant: PromptVariant,
    examples: Sequence[JudgeExample],
) -> list[dict[str, str]]:
    """``messages`` (system, user) with the variant's sentence and the examples of ``metric`` in ``lang``."""
    extra = _VARIANTS[variant][lang]
    shown = [e for e in examples if e.metric == metric and e.lang == lang]
    if not extra and not shown:
        return messages
    system, user = messages[0]["content"], messages[1]["content"]
    if extra:
        system = f"{system} {extra}"
    if shown:
        words = _WORDS[lang]
        blocks = "\n\n".join(_example(e, words) for e in shown)
        user = f"{words['header']}\n\n{blocks}\n\n---\n\n{user}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _example(example: JudgeExample, words: dict[str, str]) -> str:
    parts = [f"{words['question']}: {example.question}", f"{words['answer']}: {example.answer}"]
    if example.reference_answer:
        parts.append(f"{words['reference']}: {example.reference_answer}")
    passages = " | ".join(" ".join(c.split()) for c in example.contexts)
    if passages:
        cut = passages if len(passages) <= EXAMPLE_CONTEXT_CHARS else passages[:EXAMPLE_CONTEXT_CHARS] + "…"
        parts.append(f"{words['contexts']}: {cut}")
    if example.metric in RATED:
        verdict = f"{example.label}/5"
    else:
        verdict = words["pass"] if example.label else words["fail"]
    line = f"{words['verdict']}: {verdict}"
    if example.rationale:
        line += f" ({words['why']}: {example.rationale})"
    return f"{fence(chr(10).join(parts))}\n{line}"
