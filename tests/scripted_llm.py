"""A scripted RAG LLM for FakeLLMServer: Arabic answers from a question -> gold map, query expansions
(multi-query, step-back), HyDE passages, reranking and every judge's JSON, told apart by the system prompt
as the real model would be.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fake_llm_server import ChatRequest, Reply, TokenCount

from composer.data import load_questions
from composer.generation.prompts import ANSWER_TEMPLATES, REFUSALS
from composer.llm.preflight import PING
from composer.llm.pricing import count_text_tokens, count_tokens
from composer.llm.prompt import prompt_language
from composer.retrieval.prompts import HYDE, STEP_BACK


def template_of(req: ChatRequest) -> str | None:
    """The answer template a generation request used, None for any other request."""
    for name, localized in ANSWER_TEMPLATES.items():
        if any(req.system == t.system for t in localized.values()):
            return name
    return None


def kind_of(req: ChatRequest) -> str:
    """generate, multi_query, step_back, hyde, rerank, statements, faithfulness, correctness, rating, ping
    (a study's test request before its first trial) or unknown."""
    if req.messages == PING:
        return "ping"
    if template_of(req) is not None:
        return "generate"
    if any(req.system == t.system for t in STEP_BACK.values()):
        return "step_back"
    if '"queries"' in req.system:
        return "multi_query"
    if any(req.system == t.system for t in HYDE.values()):
        return "hyde"
    if '"ranking"' in req.system or '"score"' in req.system:
        return "rerank"
    if '"statements"' in req.system:
        return "statements"
    if '"answer": [1, 0]' in req.system:
        return "correctness"
    if '"verdicts"' in req.system and '"reason"' in req.system:
        return "faithfulness"
    if '"rating"' in req.system:
        return "rating"
    return "unknown"


def step_back(question: str) -> str:
    """The scripted step-back question: the question's topic, asked in general."""
    return f"ما الذي يعرف عن {question}"


def golds_of(questions: Path) -> dict[str, str]:
    """Each question of a questions file with its first gold answer: what ``ScriptedRAG`` answers."""
    return {q.question: q.gold_answers[0] for q in load_questions(questions)}


@dataclass
class ScriptedRAG:
    """The route: ``golds`` maps question text to its gold answer; every request is recorded by kind."""

    golds: Mapping[str, str]
    rating: int = 4
    seen: list[str] = field(default_factory=list)

    def question_of(self, req: ChatRequest) -> str | None:
        """The known question the request is about (the longest contained in its prompt)."""
        found = [q for q in self.golds if q in req.prompt]
        return max(found, key=len) if found else None

    def __call__(self, req: ChatRequest) -> Reply | str:
        kind = kind_of(req)
        self.seen.append(kind)
        question = self.question_of(req) or ""
        if kind == "generate":
            gold = self.golds.get(question)
            if gold is None:  # a question the passages cannot answer: the template's refusal
                return REFUSALS[prompt_language(req.prompt)]
            return gold if template_of(req) == "concise" else f"{gold} بحسب السياق"
        if kind == "multi_query":
            return json.dumps({"queries": [f"ما {question}", f"{question} في النص"]}, ensure_ascii=False)
        if kind == "step_back":
            return json.dumps({"question": step_back(question)}, ensure_ascii=False)
        if kind == "hyde":
            gold = self.golds.get(question, "")
            return f"تذكر الموسوعة أن الجواب هو {gold}. وهذا معروف في المصادر."
        if kind == "rerank":
            count = len(re.findall(r"^\[\d+\]", req.prompt, flags=re.MULTILINE))
            if '"ranking"' in req.system:  # listwise: the retriever's order reversed
                return json.dumps({"ranking": list(range(count, 0, -1))})
            return '{"score": 2}'
        if kind == "statements":
            return json.dumps({"statements": [question or "عبارة"]}, ensure_ascii=False)
        if kind == "correctness":
            return '{"answer": ' + json.dumps([1] * 30) + ', "reference": ' + json.dumps([1] * 30) + "}"
        if kind == "faithfulness":
            return '{"verdicts": ' + json.dumps([1] * 30) + ', "reason": "مدعوم بالسياق"}'
        if kind == "ping":
            return "ok"
        if kind == "rating":
            return json.dumps({"rating": self.rating, "reason": "إجابة صحيحة في معظمها"}, ensure_ascii=False)
        raise AssertionError(f"unscripted request: {req.system[:80]}")

    def count(self, kind: str) -> int:
        return self.seen.count(kind)


JUDGE_KINDS = frozenset({"statements", "faithfulness", "correctness", "rating"})
"""Requests a judge sends."""


def unlucky(req: ChatRequest, share: float) -> bool:
    """Whether ``req`` is among ``share`` of all requests, by a hash of its messages: the same requests
    every run (a repair request, whose messages differ, draws again)."""
    text = json.dumps(req.messages, sort_keys=True, ensure_ascii=False).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") % 1000 < share * 1000


@dataclass
class WeakJudge:
    """A small local model: ``rag``'s replies, except that about ``share`` of the judge requests get JSON
    cut off mid-way, as SmolLM2 writes it."""

    rag: ScriptedRAG
    share: float = 0.6
    malformed: int = 0

    def __call__(self, req: ChatRequest) -> Reply | str:
        reply = self.rag(req)
        if self.rag.seen[-1] in JUDGE_KINDS and unlucky(req, self.share):
            self.malformed += 1
            return '{"verdicts": [1, 0, '
        return reply


def tokenizer(model: str) -> TokenCount:
    """A FakeLLMServer tokenizer that counts as Composer estimates for ``model`` (litellm's counter), so
    that the server's totals and Composer's can be compared request for request."""

    def count(messages: list[dict[str, Any]], text: str | None) -> tuple[int, int]:
        return count_tokens(model, messages), count_text_tokens(model, text or "")

    return count
