"""Judge prompts in Arabic, Persian and English; JSON keys stay English so one parser reads every language.
Every text a judge is shown (question, answer, reference, passages) is fenced as untrusted data."""

from __future__ import annotations

from composer.llm.prompt import Localized, PromptTemplate, fenced

STATEMENTS: Localized = fenced({
    "ar": PromptTemplate(
        "قسّم الإجابة إلى عبارات واقعية قصيرة ومستقلة بذاتها، كل عبارة تُفهم دون الرجوع إلى غيرها. "
        "استبدل الضمائر بالأسماء التي تعود إليها، ولا تُضف أي معلومة غير موجودة في الإجابة، واكتب بلغة "
        "الإجابة. "
        'أجب بكائن JSON فقط: {"statements": ["...", "..."]}',
        "السؤال: $question\n\nجمل الإجابة:\n$sentences",
    ),
    "fa": PromptTemplate(
        "پاسخ را به جمله‌های کوتاه، واقعی و مستقل تقسیم کن؛ هر جمله باید بدون جمله‌های دیگر فهمیده شود. "
        "ضمیرها را با نام‌هایی که به آن‌ها اشاره دارند جایگزین کن، هیچ اطلاعاتی که در پاسخ نیست اضافه نکن و "
        "به زبان "
        'پاسخ بنویس. فقط با یک شیء JSON پاسخ بده: {"statements": ["...", "..."]}',
        "پرسش: $question\n\nجمله‌های پاسخ:\n$sentences",
    ),
    "en": PromptTemplate(
        "Break the answer into short, self-contained factual statements, each understandable on its own. "
        "Replace pronouns with the names they stand for, add nothing that is not in the answer, and write in "
        'the answer\'s language. Reply with JSON only: {"statements": ["...", "..."]}',
        "Question: $question\n\nAnswer sentences:\n$sentences",
    ),
}, "question", "sentences")

FAITHFULNESS: Localized = fenced({
    "ar": PromptTemplate(
        "لكل عبارة مرقّمة، قرّر هل يمكن استنتاجها مباشرة من السياق: 1 إذا كان السياق يدعمها، و0 إذا لم "
        "يدعمها "
        "أو لم يذكر عنها شيئًا. لا تستخدم معرفتك الخاصة. أعط حكمًا واحدًا لكل عبارة بالترتيب. "
        'أجب بكائن JSON فقط: {"verdicts": [1, 0], "reason": "جملة قصيرة"}',
        "السياق:\n$contexts\n\nالعبارات:\n$statements",
    ),
    "fa": PromptTemplate(
        "برای هر جمله شماره‌دار تعیین کن که آیا مستقیماً از متن قابل استنتاج است: 1 اگر متن آن را تأیید "
        "می‌کند و 0 "
        "اگر تأیید نمی‌کند یا چیزی درباره آن نمی‌گوید. از دانسته‌های خودت استفاده نکن. برای هر جمله به "
        "ترتیب یک حکم بده. "
        'فقط با یک شیء JSON پاسخ بده: {"verdicts": [1, 0], "reason": "یک جمله کوتاه"}',
        "متن:\n$contexts\n\nجمله‌ها:\n$statements",
    ),
    "en": PromptTemplate(
        "For each numbered statement, decide whether it can be directly inferred from the context: 1 if the "
        "context supports it, 0 if it does not or says nothing about it. Do not use your own knowledge. Give "
        'one verdict per statement, in order. Reply with JSON only: {"verdicts": [1, 0], "reason": "one '
        'short sentence"}',
        "Context:\n$contexts\n\nStatements:\n$statements",
    ),
}, "contexts", "statements")

CORRECTNESS: Localized = fenced({
    "ar": PromptTemplate(
        "قارن عبارات الإجابة بعبارات الإجابة المرجعية عن السؤال، بحسب المعنى لا الصياغة. لكل عبارة من "
        "الإجابة: 1 إذا "
        "كانت الإجابة المرجعية تدعمها، و0 إذا لم تدعمها. لكل عبارة مرجعية: 1 إذا كانت الإجابة تتضمنها، و0 "
        "إذا أغفلتها. "
        'أجب بكائن JSON فقط: {"answer": [1, 0], "reference": [1]}',
        "السؤال: $question\n\nعبارات الإجابة:\n$answer_statements\n\nالعبارات "
        "المرجعية:\n$reference_statements",
    ),
    "fa": PromptTemplate(
        "جمله‌های پاسخ را با جمله‌های پاسخ مرجع برای پرسش، از نظر معنا و نه واژه‌ها، مقایسه کن. برای هر "
        "جمله پاسخ: "
        "1 اگر پاسخ مرجع آن را تأیید می‌کند و 0 اگر نمی‌کند. برای هر جمله مرجع: 1 اگر پاسخ آن را در بر دارد "
        "و 0 اگر "
        'از قلم انداخته است. فقط با یک شیء JSON پاسخ بده: {"answer": [1, 0], "reference": [1]}',
        "پرسش: $question\n\nجمله‌های پاسخ:\n$answer_statements\n\nجمله‌های مرجع:\n$reference_statements",
    ),
    "en": PromptTemplate(
        "Compare the answer's statements with the reference answer's statements for the question, by "
        "meaning, "
        "not wording. For each answer statement: 1 if the reference supports it, 0 if not. For each "
        "reference "
        'statement: 1 if the answer covers it, 0 if the answer misses it. Reply with JSON only: {"answer": '
        '[1, 0], "reference": [1]}',
        "Question: $question\n\nAnswer statements:\n$answer_statements\n\nReference statements:\n"
        "$reference_statements",
    ),
}, "question", "answer_statements", "reference_statements")

RATING: Localized = fenced({
    "ar": PromptTemplate(
        "قيّم الإجابة مقارنةً بالإجابة المرجعية على مقياس من 1 إلى 5: 5 صحيحة وكاملة تمامًا؛ 4 صحيحة مع نقص "
        "أو عدم "
        "دقة طفيف؛ 3 صحيحة جزئيًا؛ 2 خاطئة في معظمها مع جزء صحيح صغير؛ 1 خاطئة تمامًا أو لا علاقة لها "
        "بالسؤال. "
        "احكم على المعنى لا على الصياغة. "
        'أجب بكائن JSON فقط: {"rating": 4, "reason": "جملة قصيرة"}',
        "السؤال: $question\n\nالإجابة المرجعية: $reference\n\nالإجابة: $answer",
    ),
    "fa": PromptTemplate(
        "پاسخ را در مقایسه با پاسخ مرجع در مقیاس 1 تا 5 ارزیابی کن: 5 کاملاً درست و کامل؛ 4 درست با کمبود یا "
        "نادقیقی جزئی؛ 3 تا حدی درست؛ 2 بیشتر نادرست با بخش درست کوچکی؛ 1 کاملاً نادرست یا بی‌ربط به پرسش. "
        "معنا را بسنج، نه واژه‌ها را. "
        'فقط با یک شیء JSON پاسخ بده: {"rating": 4, "reason": "یک جمله کوتاه"}',
        "پرسش: $question\n\nپاسخ مرجع: $reference\n\nپاسخ: $answer",
    ),
    "en": PromptTemplate(
        "Grade the answer against the reference answer on a 1 to 5 scale: 5 fully correct and complete; "
        "4 correct with a minor omission or imprecision; 3 partially correct; 2 mostly incorrect with a "
        "small "
        "correct part; 1 completely incorrect or unrelated to the question. Judge the meaning, not the "
        "wording. "
        'Reply with JSON only: {"rating": 4, "reason": "one short sentence"}',
        "Question: $question\n\nReference answer: $reference\n\nAnswer: $answer",
    ),
}, "question", "reference", "answer")

RELEVANCY: Localized = fenced({
    "ar": PromptTemplate(
        "اكتب $n أسئلة مختلفة تُعدّ الإجابة التالية ردًا عليها، بلغة الإجابة. وحدّد هل الإجابة مراوغة "
        '(غامضة أو متهربة أو رفض للإجابة: 1) أم لا (0). أجب بكائن JSON فقط: {"questions": ["..."], '
        '"noncommittal": 0}',
        "الإجابة: $answer",
    ),
    "fa": PromptTemplate(
        "$n پرسش متفاوت بنویس که پاسخ زیر جوابی برای آن‌ها باشد، به زبان پاسخ. و تعیین کن که آیا پاسخ "
        "طفره‌آمیز است "
        '(مبهم، گریزان یا امتناع از پاسخ: 1) یا نه (0). فقط با یک شیء JSON پاسخ بده: {"questions": ["..."], '
        '"noncommittal": 0}',
        "پاسخ: $answer",
    ),
    "en": PromptTemplate(
        "Write $n different questions that the following answer responds to, in the answer's language. Also "
        "say whether the answer is noncommittal (vague, evasive or a refusal: 1) or not (0). Reply with JSON "
        'only: {"questions": ["..."], "noncommittal": 0}',
        "Answer: $answer",
    ),
}, "answer")

CONTEXT_PRECISION: Localized = fenced({
    "ar": PromptTemplate(
        "لكل مقطع مرقّم، قرّر هل كان مفيدًا للوصول إلى الإجابة المرجعية عن السؤال: 1 مفيد، 0 غير مفيد. "
        'أعط حكمًا واحدًا لكل مقطع بالترتيب. أجب بكائن JSON فقط: {"verdicts": [1, 0]}',
        "السؤال: $question\n\nالإجابة المرجعية: $reference\n\nالمقاطع:\n$contexts",
    ),
    "fa": PromptTemplate(
        "برای هر بخش شماره‌دار تعیین کن که آیا برای رسیدن به پاسخ مرجعِ پرسش سودمند بوده است: 1 سودمند، 0 "
        "نه. "
        'برای هر بخش به ترتیب یک حکم بده. فقط با یک شیء JSON پاسخ بده: {"verdicts": [1, 0]}',
        "پرسش: $question\n\nپاسخ مرجع: $reference\n\nبخش‌ها:\n$contexts",
    ),
    "en": PromptTemplate(
        "For each numbered passage, decide whether it was useful to arrive at the reference answer to the "
        "question: 1 useful, 0 not. Give one verdict per passage, in order. Reply with JSON only: "
        '{"verdicts": '
        "[1, 0]}",
        "Question: $question\n\nReference answer: $reference\n\nPassages:\n$contexts",
    ),
}, "question", "reference", "contexts")

CONTEXT_RECALL: Localized = fenced({
    "ar": PromptTemplate(
        "لكل جملة مرقّمة من الإجابة المرجعية، قرّر هل يمكن نسبتها إلى السياق: 1 إذا كان السياق يتضمن "
        "معلومتها، "
        '0 إذا لم يتضمنها. أعط حكمًا واحدًا لكل جملة بالترتيب. أجب بكائن JSON فقط: {"verdicts": [1, 0]}',
        "السؤال: $question\n\nالسياق:\n$contexts\n\nجمل الإجابة المرجعية:\n$sentences",
    ),
    "fa": PromptTemplate(
        "برای هر جمله شماره‌دار از پاسخ مرجع تعیین کن که آیا می‌توان آن را به متن نسبت داد: 1 اگر اطلاعاتش "
        "در متن هست، "
        '0 اگر نیست. برای هر جمله به ترتیب یک حکم بده. فقط با یک شیء JSON پاسخ بده: {"verdicts": [1, 0]}',
        "پرسش: $question\n\nمتن:\n$contexts\n\nجمله‌های پاسخ مرجع:\n$sentences",
    ),
    "en": PromptTemplate(
        "For each numbered sentence of the reference answer, decide whether it can be attributed to the "
        "context: 1 if the context contains its information, 0 if not. Give one verdict per sentence, in "
        'order. Reply with JSON only: {"verdicts": [1, 0]}',
        "Question: $question\n\nContext:\n$contexts\n\nReference answer sentences:\n$sentences",
    ),
}, "question", "contexts", "sentences")

METRIC_PROMPTS: dict[str, tuple[Localized, ...]] = {
    "answer_correctness": (STATEMENTS, CORRECTNESS),
    "faithfulness": (STATEMENTS, FAITHFULNESS),
    "llm_judge_rating": (RATING,),
    "answer_relevancy": (RELEVANCY,),
    "context_precision": (CONTEXT_PRECISION,),
    "context_recall": (CONTEXT_RECALL,),
}
"""The prompts each judged metric sends: what a judge check's agreement is bound to (its prompt hash)."""
