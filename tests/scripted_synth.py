"""A scripted question writer for FakeLLMServer: answers `composer synth`'s prompts as a model would.

It tells the prompts apart by their system message (and language), reads the passages, question and
answer out of their tags, and writes questions built from the passage's own words, so every reply is
deterministic and extractive answers really are spans of the passage. ``behaviors`` maps a document id
to misbehaviours that make one filter fire for questions from that document.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from fake_llm_server import ChatRequest, Reply

from composer.data.types import Document
from composer.llm.preflight import PING
from composer.synth import prompts

PROMPTS = {
    "factoid": prompts.FACTOID,
    "conceptual": prompts.CONCEPTUAL,
    "multi_hop": prompts.MULTI_HOP,
    "unanswerable": prompts.UNANSWERABLE,
    "supported": prompts.SUPPORTED,
    "answered": prompts.ANSWERED,
    "closed_book": prompts.CLOSED_BOOK,
}
_PASSAGE = re.compile(r"<passage[^>]*>\n⟦data⟧\n(.*?)\n⟦/data⟧\n</passage>", re.DOTALL)
_QUESTION = re.compile(r"<question>⟦data⟧\n(.*?)\n⟦/data⟧</question>", re.DOTALL)
_ANSWER = re.compile(r"<answer>⟦data⟧\n(.*?)\n⟦/data⟧</answer>", re.DOTALL)
_WORD = re.compile(r"(?:[^\W\d_]|[\u064b-\u065f\u0670]){3,}|\d{3,4}")  # harakat inside words

# (what about, how come, which detail is missing) per language.
_PHRASES = {
    "ar": (
        "ما الذي يرد بعد «{lead}» في الحديث عن {topic}؟",
        "كيف يمكن تفسير أن {lead} في سياق {topic}؟",
        "ما الذي يربط «{lead}» بـ«{other}»؟",
        "كم كان عدد سكان {topic} في عام 1066 وفق ما كُتب عن «{lead}»؟",
    ),
    "fa": (
        "پس از «{lead}» دربارهٔ {topic} چه آمده است؟",
        "چگونه می‌توان توضیح داد که {lead} در زمینهٔ {topic}؟",
        "چه چیزی «{lead}» را به «{other}» پیوند می‌دهد؟",
        "جمعیت {topic} در سال 1066 بر پایهٔ آنچه دربارهٔ «{lead}» نوشته‌اند چقدر بود؟",
    ),
    "en": (
        "What comes after “{lead}” when speaking of {topic}?",
        "How can one explain that {lead} for {topic}?",
        "What links “{lead}” to “{other}”?",
        "How many people lived in {topic} in 1066 according to what is written about “{lead}”?",
    ),
}
# Behaviours (a document id -> set of these) that each make one filter fire.
BEHAVIORS = frozenset(
    {
        "malformed",
        "english",
        "long_question",
        "answer_not_in_passage",
        "answer_in_question",
        "same_question",
        "unsupported",
        "answered",
        "closed_book",
        "check_garbage",
        "arabic_letters",
    }
)


def prompt_of(req: ChatRequest) -> tuple[str, str]:
    """(prompt name, language) of a synth request."""
    for name, localized in PROMPTS.items():
        for lang, template in localized.items():
            if req.system == template.system:
                return name, lang
    raise AssertionError(f"not a synth prompt: {req.system[:80]}")


def _lead_and_answer(passage: str, visit: int) -> tuple[str, str]:
    """Three words of the passage, and the span of the two words after them (moving on with each visit)."""
    words = list(_WORD.finditer(passage))
    at = (3 + 5 * visit) % max(1, len(words) - 6)
    lead = " ".join(m.group() for m in words[at : at + 3])
    return lead, passage[words[at + 3].start() : words[at + 4].end()]


@dataclass
class ScriptedSynth:
    """The route. ``seen`` records (prompt, language) of every request, ``questions`` question -> doc id,
    ``references`` question -> the answer it was checked with."""

    documents: Iterable[Document]
    behaviors: dict[str, set[str]] = field(default_factory=dict)
    seen: list[tuple[str, str]] = field(default_factory=list)
    questions: dict[str, str] = field(default_factory=dict)
    references: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.docs = list(self.documents)

    def doc_of(self, passage: str) -> Document:
        return next(d for d in self.docs if passage in d.text)

    def has(self, doc: Document, behavior: str) -> bool:
        return behavior in self.behaviors.get(doc.id, set())

    def __call__(self, req: ChatRequest) -> Reply | str:
        if req.messages == PING:  # the test request before the first question: a model answers it
            return "ok"
        if sum(m.get("role") == "user" for m in req.messages) > 1:  # the client's repair request
            req = replace(req, messages=req.messages[:-1])  # misbehaves as the request it repairs did
        name, lang = prompt_of(req)
        self.seen.append((name, lang))
        passages = _PASSAGE.findall(req.prompt)
        if name in ("supported", "answered", "closed_book"):
            return self._check(name, req.prompt, passages)
        doc = self.doc_of(passages[0])
        if self.has(doc, "malformed"):
            return "Sure! Here is a question about the passage, in prose and without any JSON."
        visit = req.prompt.count("\n- ")  # questions already written from this passage
        reply = self._write(name, "en" if self.has(doc, "english") else lang, passages, doc, visit)
        self.questions[reply["question"]] = doc.id
        return json.dumps(reply, ensure_ascii=False)

    def _write(self, name: str, lang: str, passages: list[str], doc: Document, visit: int) -> dict[str, str]:
        """A question from the passage's words; extractive answers are spans of it (two words on)."""
        lead, answer = _lead_and_answer(passages[0], visit)
        topic = doc.title or lead
        what, how, link, missing = _PHRASES[lang]
        if self.has(doc, "same_question"):
            return {"question": what.format(lead="…", topic="?"), "answer": answer}
        if name == "unanswerable":
            return {"question": missing.format(topic=topic, lead=lead)}
        if name == "multi_hop":
            other, answer = _lead_and_answer(passages[1], visit)
            question = link.format(lead=lead, other=other)
        elif name == "conceptual":
            question, answer = how.format(lead=lead, topic=topic), passages[0][:200].rsplit(" ", 1)[0]
        else:
            question = what.format(lead=lead, topic=topic)
        if self.has(doc, "long_question"):
            question = f"{question} {passages[0]} {passages[0]}"
        if self.has(doc, "answer_not_in_passage"):
            answer = "Zanzibar Quartz" if lang == "en" else "زنجبار الكوارتز"
        if self.has(doc, "answer_in_question"):
            question = f"{question} ({answer})"
        if self.has(doc, "arabic_letters"):  # Persian typed with Arabic yeh and kaf
            question, answer = (t.replace("ی", "ي").replace("ک", "ك") for t in (question, answer))
        return {"question": question, "answer": answer}

    def _check(self, name: str, prompt: str, passages: list[str]) -> str:
        found = _QUESTION.search(prompt)
        question = found.group(1) if found else ""
        doc_id = self.questions.get(question)
        doc = next((d for d in self.docs if d.id == doc_id), None)

        def flag(behavior: str) -> bool:
            return doc is not None and self.has(doc, behavior)

        if flag("check_garbage"):
            return "I would say yes, probably."
        if name == "supported":
            answer = _ANSWER.search(prompt)
            self.references[question] = answer.group(1) if answer else ""
            return json.dumps({"supported": 0 if flag("unsupported") else 1, "reason": "ok"})
        if name == "answered":
            return json.dumps({"answerable": 1 if flag("answered") else 0, "reason": "ok"})
        # closed book: the model "knows" the answer only for documents told so
        known = self.references.get(question) if flag("closed_book") else None
        return json.dumps({"answer": known}, ensure_ascii=False)

    def count(self, name: str) -> int:
        return sum(1 for n, _ in self.seen if n == name)
