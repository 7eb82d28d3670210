"""Prompts that write and check synthetic questions, in Arabic, Persian and English.

Each prompt is written in the passage's language and asks for output in it (Persian with Persian ی and
ک); JSON keys stay English so one parser reads every language. Passages, questions and answers travel in
tags (``<passage>``, ``<question>``, ``<answer>``), which models keep apart from instructions reliably, each
fenced as untrusted data (``composer.llm.prompt.fence``): a passage cannot close its tag or its fence.
"""

from __future__ import annotations

from collections.abc import Sequence

from composer.llm.prompt import Localized, PromptLanguage, PromptTemplate, defang, fence, fenced
from composer.synth.passages import Passage

_ONE = "$passages$avoid"
_CHECK = "$passages\n\n<question>$question</question>\n<answer>$answer</answer>"
_ASKED = "$passages\n\n<question>$question</question>"

FACTOID: Localized = fenced({
    "ar": PromptTemplate(
        "أنت تكتب أسئلة لتقييم نظام بحث انطلاقًا من مقطع نصي. اكتب سؤالًا واحدًا عن حقيقة محددة، جوابه "
        "عبارة قصيرة (اسم أو رقم أو تاريخ أو مكان أو مصطلح في بضع كلمات) منقولة حرفيًا من المقطع. يجب أن "
        "يكون السؤال مفهومًا بذاته لمن لم يقرأ المقطع: اذكر الموضوع صراحة، ولا تقل «المقطع» أو «النص»، "
        "ولا تستعمل ضميرًا لا يُعرف مرجعه. لا تنسخ الجملة التي تحمل الجواب كما هي، ولا تضع الجواب في "
        "السؤال. اكتب السؤال بالعربية الفصحى. "
        'أجب بكائن JSON فقط: {"question": "...", "answer": "العبارة كما وردت في المقطع"}',
        _ONE,
    ),
    "fa": PromptTemplate(
        "تو برای ارزیابی یک سامانهٔ جست‌وجو از روی یک متن پرسش می‌نویسی. یک پرسش واقعیت‌محور بنویس که "
        "پاسخش عبارتی کوتاه (نام، عدد، تاریخ، مکان یا اصطلاحی در چند واژه) باشد که عیناً از متن برداشته "
        "شده است. پرسش باید برای کسی که متن را ندیده است به‌تنهایی فهمیدنی باشد: موضوع را صریح نام ببر، "
        "از «متن» یا «این بخش» سخن نگو و ضمیری که مرجعش روشن نیست به کار نبر. جمله‌ای را که پاسخ در آن "
        "است عیناً رونویسی نکن و پاسخ را در پرسش نیاور. پرسش را به فارسی و با حروف فارسی (ی و ک) بنویس. "
        'فقط با یک شیء JSON پاسخ بده: {"question": "...", "answer": "عبارت، همان‌گونه که در متن آمده است"}',
        _ONE,
    ),
    "en": PromptTemplate(
        "You write questions for evaluating a search system from a passage. Write ONE factoid question whose "
        "answer is a short span (a name, number, date, place or term of a few words) copied exactly from the "
        "passage. The question must make sense to someone who has not read the passage: name the subject, "
        'do not say "the passage" or "the text", and use no pronoun whose referent is unclear. Do not copy '
        "the sentence that holds the answer word for word, and do not put the answer in the question. Write "
        'the question in English. Reply with JSON only: {"question": "...", "answer": "the span as it '
        'appears in the passage"}',
        _ONE,
    ),
})

CONCEPTUAL: Localized = fenced({
    "ar": PromptTemplate(
        "أنت تكتب أسئلة لتقييم نظام بحث انطلاقًا من مقطع نصي. اكتب سؤالًا مفاهيميًا واحدًا: يسأل لماذا أو "
        "كيف حدث أمر ما، أو ما معنى أمر ما، أو ما العلاقة بين أمرين ورد ذكرهما في المقطع، وجوابه جملة إلى "
        "ثلاث جمل تستند إلى المقطع وحده. يجب أن يكون السؤال مفهومًا بذاته لمن لم يقرأ المقطع: اذكر الموضوع "
        "صراحة، ولا تقل «المقطع» أو «النص». اكتب السؤال والجواب بالعربية الفصحى. "
        'أجب بكائن JSON فقط: {"question": "...", "answer": "جملة إلى ثلاث جمل"}',
        _ONE,
    ),
    "fa": PromptTemplate(
        "تو برای ارزیابی یک سامانهٔ جست‌وجو از روی یک متن پرسش می‌نویسی. یک پرسش مفهومی بنویس: بپرسد چرا "
        "یا چگونه چیزی رخ داده است، معنای چیزی چیست، یا دو چیزِ گفته‌شده در متن چه نسبتی با هم دارند؛ "
        "پاسخش یک تا سه جمله باشد که تنها بر متن تکیه دارد. پرسش باید برای کسی که متن را ندیده است "
        "به‌تنهایی فهمیدنی باشد: موضوع را صریح نام ببر و از «متن» یا «این بخش» سخن نگو. پرسش و پاسخ را "
        "به فارسی و با حروف فارسی (ی و ک) بنویس. "
        'فقط با یک شیء JSON پاسخ بده: {"question": "...", "answer": "یک تا سه جمله"}',
        _ONE,
    ),
    "en": PromptTemplate(
        "You write questions for evaluating a search system from a passage. Write ONE conceptual question: "
        "it asks why or how something happened, what something means, or how two things the passage mentions "
        "relate, and its answer takes one to three sentences that rest on the passage alone. The question "
        'must make sense to someone who has not read the passage: name the subject and do not say "the '
        'passage" or "the text". Write the question and the answer in English. Reply with JSON only: '
        '{"question": "...", "answer": "one to three sentences"}',
        _ONE,
    ),
})

MULTI_HOP: Localized = fenced({
    "ar": PromptTemplate(
        "أنت تكتب أسئلة لتقييم نظام بحث انطلاقًا من مقطعين مترابطين. اكتب سؤالًا واحدًا لا يمكن الإجابة عنه "
        "إلا بالجمع بين معلومة من المقطع 1 ومعلومة من المقطع 2 (مثلًا: يذكر المقطع 1 شخصًا أو مكانًا، "
        "ويذكر المقطع 2 حقيقة عنه). الجواب عبارة قصيرة منقولة حرفيًا من أحد المقطعين. يجب أن يكون السؤال "
        "مفهومًا بذاته، ولا يذكر «المقطع 1» أو «المقطع 2». اكتب السؤال بالعربية الفصحى. "
        'أجب بكائن JSON فقط: {"question": "...", "answer": "العبارة كما وردت في أحد المقطعين"}',
        _ONE,
    ),
    "fa": PromptTemplate(
        "تو برای ارزیابی یک سامانهٔ جست‌وجو از روی دو متن مرتبط پرسش می‌نویسی. یک پرسش بنویس که تنها با "
        "کنار هم گذاشتن یک واقعیت از متن 1 و یک واقعیت از متن 2 بتوان به آن پاسخ داد (برای نمونه: متن 1 "
        "از شخص یا مکانی نام می‌برد و متن 2 واقعیتی دربارهٔ آن می‌گوید). پاسخ عبارتی کوتاه است که عیناً از "
        "یکی از دو متن برداشته شده است. پرسش باید به‌تنهایی فهمیدنی باشد و از «متن 1» یا «متن 2» نام نبرد. "
        "پرسش را به فارسی و با حروف فارسی (ی و ک) بنویس. "
        'فقط با یک شیء JSON پاسخ بده: {"question": "...", "answer": "عبارت، همان‌گونه که در یکی از دو متن '
        'آمده است"}',
        _ONE,
    ),
    "en": PromptTemplate(
        "You write questions for evaluating a search system from two related passages. Write ONE question "
        "that can only be answered by combining a fact from passage 1 with a fact from passage 2 (for "
        "example: passage 1 names a person or place, passage 2 gives a fact about it). The answer is a short "
        "span copied exactly from one of the passages. The question must make sense on its own and must not "
        'mention "passage 1" or "passage 2". Write the question in English. Reply with JSON only: '
        '{"question": "...", "answer": "the span as it appears in one of the passages"}',
        _ONE,
    ),
})

UNANSWERABLE: Localized = fenced({
    "ar": PromptTemplate(
        "أنت تكتب أسئلة لتقييم قدرة نظام بحث على الامتناع عن الإجابة. اكتب سؤالًا واحدًا قد يطرحه قارئ "
        "مهتم بموضوع المقطع لكن المقطع لا يجيب عنه: يذكر الأشخاص أو الأماكن أو الموضوعات نفسها، ويسأل عن "
        "تفصيل لا يرد في المقطع. لا تبنِ السؤال على افتراض خاطئ، ولا تجعله سؤال نعم أو لا. يجب أن يكون "
        "السؤال مفهومًا بذاته، ولا يذكر «المقطع» أو «النص». اكتب السؤال بالعربية الفصحى. "
        'أجب بكائن JSON فقط: {"question": "..."}',
        _ONE,
    ),
    "fa": PromptTemplate(
        "تو برای سنجش توانایی یک سامانهٔ جست‌وجو در خودداری از پاسخ، پرسش می‌نویسی. یک پرسش بنویس که "
        "خواننده‌ای علاقه‌مند به موضوع متن ممکن است بپرسد، اما متن به آن پاسخ نمی‌دهد: همان اشخاص، مکان‌ها "
        "یا موضوع‌ها را نام می‌برد و جزئیاتی را می‌پرسد که در متن نیامده است. پرسش را بر پیش‌فرضی نادرست "
        "بنا نکن و پرسش بله یا خیر ننویس. پرسش باید به‌تنهایی فهمیدنی باشد و از «متن» سخن نگوید. پرسش را "
        "به فارسی و با حروف فارسی (ی و ک) بنویس. "
        'فقط با یک شیء JSON پاسخ بده: {"question": "..."}',
        _ONE,
    ),
    "en": PromptTemplate(
        "You write questions for evaluating whether a search system declines to answer. Write ONE question "
        "that a reader interested in the passage's topic might ask but that the passage does NOT answer: it "
        "names the same people, places or subjects and asks for a detail the passage does not give. Do not "
        "build the question on a false premise and do not make it a yes/no question. The question must make "
        'sense on its own and must not mention "the passage" or "the text". Write the question in English. '
        'Reply with JSON only: {"question": "..."}',
        _ONE,
    ),
})

CONVERSATION: Localized = fenced({
    "ar": PromptTemplate(
        "أنت تكتب محادثات لتقييم نظام بحث انطلاقًا من مقطع نصي. اكتب محادثة من سؤال أول ثم أسئلة متابعة "
        "عددها $follow_ups، كلها عن المقطع. السؤال الأول مفهوم بذاته: يذكر الموضوع صراحة. كل سؤال متابعة "
        "يعتمد على ما قبله ولا يُفهم وحده: يشير إلى الموضوع بضمير (مثل «ومتى توفي؟»)، أو يحذف ما سبق ذكره، "
        "أو يقول «وماذا عن ...؟»، ولا يكرر اسم الموضوع. كل سؤال يسأل عن حقيقة مختلفة، وجوابه عبارة قصيرة "
        "منقولة حرفيًا من المقطع، ولا تضع الجواب في السؤال. ولكل سؤال متابعة اكتب standalone: السؤال نفسه "
        "معادَ الصياغة ليُفهم وحده، بذكر الموضوع صراحة. لا تقل «المقطع» أو «النص». اكتب بالعربية الفصحى. "
        'أجب بكائن JSON فقط: {"turns": [{"question": "...", "answer": "..."}, '
        '{"question": "...", "answer": "...", "standalone": "..."}]}',
        _ONE,
    ),
    "fa": PromptTemplate(
        "تو برای ارزیابی یک سامانهٔ جست‌وجو از روی یک متن گفت‌وگو می‌نویسی. گفت‌وگویی بنویس با یک پرسش "
        "نخست و سپس $follow_ups پرسش پیگیری، همه دربارهٔ متن. پرسش نخست به‌تنهایی فهمیدنی است و موضوع را "
        "صریح نام می‌برد. هر پرسش پیگیری به پرسش‌های پیشین تکیه دارد و به‌تنهایی فهمیدنی نیست: با ضمیر به "
        "موضوع اشاره می‌کند (مانند «قیمتش چقدر است؟»)، آنچه پیش‌تر گفته شده را نمی‌آورد، یا می‌گوید «و "
        "دربارهٔ ... چه؟»، و نام موضوع را تکرار نمی‌کند. هر پرسش واقعیتی متفاوت را می‌پرسد و پاسخش عبارتی "
        "کوتاه است که عیناً از متن برداشته شده است؛ پاسخ را در پرسش نیاور. برای هر پرسش پیگیری standalone "
        "را هم بنویس: همان پرسش، بازنویسی‌شده تا به‌تنهایی فهمیدنی باشد و موضوع را صریح نام ببرد. از «متن» "
        "یا «این بخش» سخن نگو. به فارسی و با حروف فارسی (ی و ک) بنویس. "
        'فقط با یک شیء JSON پاسخ بده: {"turns": [{"question": "...", "answer": "..."}, '
        '{"question": "...", "answer": "...", "standalone": "..."}]}',
        _ONE,
    ),
    "en": PromptTemplate(
        "You write conversations for evaluating a search system from a passage. Write a conversation of a "
        "first question and then $follow_ups follow-up questions, all about the passage. The first question "
        "makes sense on its own: it names the subject. Each follow-up leans on the questions before it and "
        'makes no sense alone: it refers to the subject with a pronoun (like "and when did he die?"), leaves '
        'out what was already said, or asks "what about ...?", and it does not repeat the subject\'s name. '
        "Each question asks for a different fact, its answer is a short span copied exactly from the "
        "passage, and no question gives its answer away. For each follow-up also write standalone: the same "
        'question rewritten to make sense alone, naming the subject. Do not say "the passage" or "the '
        'text". Write in English. Reply with JSON only: {"turns": [{"question": "...", "answer": "..."}, '
        '{"question": "...", "answer": "...", "standalone": "..."}]}',
        _ONE,
    ),
})
"""A conversation on one passage: its first question, follow-ups leaning on it, their standalone rewrites."""

SUPPORTED: Localized = fenced({
    "ar": PromptTemplate(
        "أنت تتحقق من سؤال وجوابه مقابل نص. قرّر هل ينص النص وحده على هذا الجواب عن السؤال أو يدل عليه "
        "دلالة مباشرة: 1 إذا كان كذلك، و0 إذا كان الجواب خاطئًا أو مدعومًا جزئيًا فقط أو يحتاج إلى معرفة من "
        "خارج النص. لا تستخدم معرفتك الخاصة. "
        'أجب بكائن JSON فقط: {"supported": 1, "reason": "جملة قصيرة"}',
        _CHECK,
    ),
    "fa": PromptTemplate(
        "تو یک پرسش و پاسخش را با یک متن می‌سنجی. تعیین کن که آیا متن به‌تنهایی این پاسخ را برای پرسش بیان "
        "می‌کند یا مستقیماً بر آن دلالت دارد: 1 اگر چنین است، و 0 اگر پاسخ نادرست است، تنها تا حدی تأیید "
        "می‌شود یا به دانشی بیرون از متن نیاز دارد. از دانسته‌های خودت استفاده نکن. "
        'فقط با یک شیء JSON پاسخ بده: {"supported": 1, "reason": "یک جملهٔ کوتاه"}',
        _CHECK,
    ),
    "en": PromptTemplate(
        "You check a question and its answer against a text. Decide whether the text alone states this "
        "answer to the question or directly implies it: 1 if it does, 0 if the answer is wrong, only partly "
        "supported, or needs knowledge from outside the text. Do not use your own knowledge. Reply with JSON "
        'only: {"supported": 1, "reason": "one short sentence"}',
        _CHECK,
    ),
}, "question", "answer")

ANSWERED: Localized = fenced({
    "ar": PromptTemplate(
        "قرّر هل يجيب النص عن السؤال: 1 إذا كان النص ينص على الجواب أو يدل عليه دلالة مباشرة، و0 إذا لم "
        "يكن كذلك. لا تستخدم معرفتك الخاصة. "
        'أجب بكائن JSON فقط: {"answerable": 0, "reason": "جملة قصيرة"}',
        _ASKED,
    ),
    "fa": PromptTemplate(
        "تعیین کن که آیا متن به پرسش پاسخ می‌دهد: 1 اگر متن پاسخ را بیان می‌کند یا مستقیماً بر آن دلالت "
        "دارد، و 0 اگر چنین نیست. از دانسته‌های خودت استفاده نکن. "
        'فقط با یک شیء JSON پاسخ بده: {"answerable": 0, "reason": "یک جملهٔ کوتاه"}',
        _ASKED,
    ),
    "en": PromptTemplate(
        "Decide whether the text answers the question: 1 if the text states the answer or directly implies "
        "it, 0 if it does not. Do not use your own knowledge. Reply with JSON only: "
        '{"answerable": 0, "reason": "one short sentence"}',
        _ASKED,
    ),
}, "question")

CLOSED_BOOK: Localized = fenced({
    "ar": PromptTemplate(
        "أجب عن السؤال من معرفتك العامة في كلمات قليلة ودون شرح. إذا كنت لا تعرف الجواب، أو كان السؤال لا "
        "يُجاب عنه دون الرجوع إلى وثيقة بعينها، فاجعل قيمة answer هي null. "
        'أجب بكائن JSON فقط: {"answer": "..."}',
        "<question>$question</question>",
    ),
    "fa": PromptTemplate(
        "از دانسته‌های عمومی خودت در چند واژه و بی‌توضیح به پرسش پاسخ بده. اگر پاسخ را نمی‌دانی، یا پرسش "
        "بدون مراجعه به سندی مشخص پاسخ‌دادنی نیست، مقدار answer را null بگذار. "
        'فقط با یک شیء JSON پاسخ بده: {"answer": "..."}',
        "<question>$question</question>",
    ),
    "en": PromptTemplate(
        "Answer the question from your general knowledge in a few words, without explanation. If you do not "
        "know the answer, or the question cannot be answered without a particular document, set answer to "
        'null. Reply with JSON only: {"answer": "..."}',
        "<question>$question</question>",
    ),
}, "question")

GENERATE: dict[str, Localized] = {
    "factoid": FACTOID,
    "conceptual": CONCEPTUAL,
    "multi_hop": MULTI_HOP,
    "unanswerable": UNANSWERABLE,
}

_ALREADY_ASKED: dict[PromptLanguage, str] = {
    "ar": "أسئلة كُتبت من قبل عن هذا النص (اكتب سؤالًا مختلفًا عنها):",
    "fa": "پرسش‌هایی که پیش‌تر از این متن نوشته شده‌اند (پرسشی متفاوت با آن‌ها بنویس):",
    "en": "Questions already written from this text (write a different one):",
}


def passage_block(passages: Sequence[Passage]) -> str:
    """The passages in tags, numbered when there are several (multi-hop), with their documents' titles;
    each text fenced and each title defanged, so neither can close its tag."""
    parts = []
    for i, p in enumerate(passages, 1):
        number = f' id="{i}"' if len(passages) > 1 else ""
        title = f' title="{defang(p.title).replace(chr(34), chr(39))}"' if p.title else ""
        parts.append(f"<passage{number}{title}>\n{fence(p.text)}\n</passage>")
    return "\n".join(parts)


def avoid_block(lang: PromptLanguage, asked: Sequence[str]) -> str:
    """The questions already written from these passages (fenced: they are model output), so a repeat
    visit asks something new."""
    if not asked:
        return ""
    return "\n\n" + _ALREADY_ASKED[lang] + "\n" + fence("\n".join(f"- {q}" for q in asked))
