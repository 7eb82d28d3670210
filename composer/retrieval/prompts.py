"""Retrieval-side prompts in Arabic, Persian and English: a follow-up's standalone rewrite, query expansion
and LLM reranking.

Each asks for JSON the parsers in ``composer.llm.parse`` read back (queries, a step-back question, a 0-3
grade, a ranking). The question, the conversation's history and the passages are fenced as untrusted data
(``composer.llm.prompt.fence``).
"""

from __future__ import annotations

from composer.llm.prompt import Localized, PromptTemplate, fenced

MULTI_QUERY: Localized = fenced({
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
}, "question")

HYDE: Localized = fenced({
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
}, "question")

# Step-back prompting (Zheng et al. 2023, "Take a Step Back"): one more general question about the concept,
# entity or period behind the question, whose answer is the background the original needs. The examples
# name people found in neither ARCD nor PersianQA.
STEP_BACK: Localized = fenced({
    "ar": PromptTemplate(
        "أنت خبير واسع الاطلاع. تراجع خطوة عن السؤال: أعد صياغته سؤالًا واحدًا أعمّ عن المفهوم أو الشخص "
        "أو الحقبة التي يقوم عليها، بحيث تقدّم إجابته الخلفية اللازمة للإجابة عن السؤال الأصلي. اكتبه "
        "باللغة العربية واحتفظ بالأسماء المهمة فيه.\n"
        "أمثلة:\n"
        "السؤال: ما المنصب الذي شغله طه حسين عام 1950؟\n"
        "السؤال الأعم: ما المناصب التي شغلها طه حسين في حياته؟\n"
        "السؤال: هل زار ابن بطوطة الصين؟\n"
        "السؤال الأعم: ما البلدان التي زارها ابن بطوطة في رحلاته؟\n"
        'أجب بكائن JSON فقط: {"question": "..."}',
        "السؤال: $question",
    ),
    "fa": PromptTemplate(
        "تو در دانش عمومی خبره‌ای. یک گام از پرسش عقب بایست: آن را به یک پرسش کلی‌تر درباره مفهوم، شخص یا "
        "دوره‌ای که پرسش بر آن استوار است بازنویسی کن، طوری که پاسخش زمینه لازم برای پاسخ به پرسش اصلی را "
        "فراهم کند. به فارسی بنویس و نام‌های کلیدی را نگه دار.\n"
        "نمونه‌ها:\n"
        "پرسش: امیرکبیر در سال ۱۲۲۷ چه سمتی داشت؟\n"
        "پرسش کلی‌تر: امیرکبیر در طول زندگی‌اش چه سمت‌هایی داشت؟\n"
        "پرسش: آیا پروین اعتصامی در تبریز به دنیا آمد؟\n"
        "پرسش کلی‌تر: زندگی‌نامه پروین اعتصامی چیست؟\n"
        'فقط با یک شیء JSON پاسخ بده: {"question": "..."}',
        "پرسش: $question",
    ),
    "en": PromptTemplate(
        "You are an expert in world knowledge. Step back from the question: rewrite it as one more general "
        "question about the concept, entity or period behind it, whose answer gives the background needed "
        "to answer the original. Write it in the question's language and keep its key names.\n"
        "Examples:\n"
        "Question: Which position did Knox Cunningham hold from May 1955 to April 1956?\n"
        "Step-back question: Which positions has Knox Cunningham held in his career?\n"
        "Question: Was Estella Leopold born in Idaho?\n"
        "Step-back question: What is Estella Leopold's personal history?\n"
        'Reply with JSON only: {"question": "..."}',
        "Question: $question",
    ),
}, "question")

RERANK_POINTWISE: Localized = fenced({
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
}, "question", "passage")

RERANK_LISTWISE: Localized = fenced({
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
}, "question", "passages")

# A follow-up condensed with its history into one question that stands alone (conversation.rewrite: llm),
# written in the conversation's language and never answered: it is what is searched.
CONDENSE: Localized = fenced({
    "ar": PromptTemplate(
        "أعد كتابة سؤال المتابعة سؤالًا واحدًا مستقلًا يُفهم دون المحادثة: ضع مكان الضمائر والإشارات ما تعود "
        "عليه في المحادثة، واكتبه باللغة العربية دون أن تجيب عنه. "
        'أجب بكائن JSON فقط: {"question": "..."}',
        "المحادثة:\n$history\n\nسؤال المتابعة: $question",
    ),
    "fa": PromptTemplate(
        "پرسش پیگیری را به یک پرسش مستقل بازنویسی کن که بدون گفت‌وگو فهمیده شود: به جای ضمیرها و اشاره‌ها "
        "آنچه را در گفت‌وگو به آن برمی‌گردند بگذار، به فارسی بنویس و به آن پاسخ نده. "
        'فقط با یک شیء JSON پاسخ بده: {"question": "..."}',
        "گفت‌وگو:\n$history\n\nپرسش پیگیری: $question",
    ),
    "en": PromptTemplate(
        "Rewrite the follow-up as one standalone question that is understood without the conversation: "
        "replace pronouns and references with what they refer to in the conversation, write it in the "
        'conversation\'s language, and do not answer it. Reply with JSON only: {"question": "..."}',
        "Conversation:\n$history\n\nFollow-up question: $question",
    ),
}, "history", "question")
