"""Synthetic conversations: on one passage, a first question, then follow-ups that lean on it.

One generation call writes a conversation of ``1 + follow_ups`` user turns, each with its answer (a span of
the passage) and, for a follow-up, its gold standalone rewrite. Each turn goes through the filters a single
question does (``Screening``), applied to its standalone form (the first question is its own): only a
question that stands alone can be checked against the passage or asked without it. A follow-up as asked must
also be in the passage's script and lean on the earlier turns (``filters.leans_on``), else it is dropped as
``self_contained``. A conversation ends before its first dropped turn (later turns may lean on it) and is
kept when its first question and at least one follow-up remain. Rounds, the attempt budget, the cache and
the seed work as for a question set (``engine``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from composer.data.types import Corpus
from composer.llm.client import LLMClient
from composer.synth import filters
from composer.synth.candidate import Candidate
from composer.synth.config import SynthConfig
from composer.synth.passages import Lookahead, Passage, stratified
from composer.synth.prompts import CONVERSATION, avoid_block, passage_block
from composer.synth.replies import parse_conversation
from composer.synth.screening import Screening

PRIOR_KEEP_RATE = 0.6
"""Assumed share of conversations kept, before the run has shown its own."""
ASKED_IN_PROMPT = 10
"""At most this many earlier first questions from the same passage are listed in a prompt."""


@dataclass
class Exchange:
    """One user turn: its text as asked, and ``candidate``, its standalone form with its answer, screened."""

    text: str
    candidate: Candidate


@dataclass
class Conversation:
    """A conversation asked of ``passage``; ``ordinal`` counts earlier visits, so a repeat gets its own id."""

    index: int
    passage: Passage
    ordinal: int
    turns: list[Exchange] = field(default_factory=list)
    dropped: str | None = None
    """Why no turn exists (the generation call failed)."""
    detail: str = ""

    def drop(self, reason: str, detail: str = "") -> None:
        self.dropped, self.detail = reason, detail

    @property
    def kept_turns(self) -> list[Exchange]:
        """The turns before the first dropped one."""
        out: list[Exchange] = []
        for turn in self.turns:
            if turn.candidate.dropped is not None:
                break
            out.append(turn)
        return out

    @property
    def kept(self) -> bool:
        return len(self.kept_turns) >= 2

    @property
    def ended_by(self) -> str | None:
        """Why the conversation was not kept (the reason of the turn that ended it), None when kept."""
        if self.kept:
            return None
        return self.dropped or next((t.candidate.dropped for t in self.turns if t.candidate.dropped), None)

    def cid(self, seed: int) -> str:
        """Stable across runs: the seed, the passage and the visit fix it."""
        payload = json.dumps([seed, "conversation", self.passage.key, self.ordinal])
        return f"syn-conv-{hashlib.sha1(payload.encode()).hexdigest()[:10]}"

    def row(self, seed: int, model: str) -> dict[str, Any]:
        """One line of the one-conversation-per-line format: user turns labelled with the passage's document,
        their answer and (follow-ups) their standalone rewrite, each but the last answered by an assistant
        turn holding its answer; provenance in ``metadata``."""
        p = self.passage
        turns: list[dict[str, Any]] = []
        spans: list[dict[str, Any]] = []
        kept = self.kept_turns
        for i, turn in enumerate(kept):
            c = turn.candidate
            assert c.answer is not None and c.span is not None
            user: dict[str, Any] = {
                "role": "user",
                "text": turn.text,
                "relevant_ids": [p.doc_id],
                "reference_answer": c.answer,
                "answers": [c.answer],
            }
            if i:
                user["standalone"] = c.question
            turns.append(user)
            if i < len(kept) - 1:
                turns.append({"role": "assistant", "text": c.answer})
            spans.append({"doc_id": p.doc_id, "start": p.start + c.span[1], "end": p.start + c.span[2]})
        metadata = {
            "kind": "conversation",
            "lang": p.lang,
            "source_doc_ids": [p.doc_id],
            "spans": [{"doc_id": p.doc_id, "start": p.start, "end": p.end}],
            "answer_spans": spans,
            "generator": model,
            "seed": seed,
        }
        return {"id": self.cid(seed), "turns": turns, "metadata": metadata}


class ConversationRun(Screening):
    """Rounds of conversations until ``config.conversations`` are kept or the attempt budget is spent."""

    def __init__(self, corpus: Corpus, config: SynthConfig, client: LLMClient) -> None:
        super().__init__(corpus, config, client)
        self.target = config.conversations
        self.budget = math.ceil(config.max_attempts * config.conversations)
        self.passages = Lookahead(stratified(self.by_doc, config.seed))
        self.conversations: list[Conversation] = []
        self.asked: dict[str, list[str]] = {}
        self.visits: Counter[str] = Counter()
        self.rounds = 0

    async def execute(self) -> None:
        while len(self.conversations) < self.budget:
            kept = sum(c.kept for c in self.conversations)
            if kept >= self.target:
                return
            rate = (kept + 2 * PRIOR_KEEP_RATE) / (len(self.conversations) + 2)
            wanted = math.ceil((self.target - kept) / max(rate, 0.2))
            count = min(wanted, self.budget - len(self.conversations))
            planned: list[Conversation] = []
            while len(planned) < count and self.passages.peek().key not in {c.passage.key for c in planned}:
                p = self.passages.take()  # a repeat visit waits for the next round, which knows this one's
                planned.append(Conversation(len(self.conversations) + len(planned), p, self.visits[p.key]))
                self.visits[p.key] += 1
            self.rounds += 1
            await self._round(planned)

    async def _round(self, planned: list[Conversation]) -> None:
        """Generate and screen concurrently; drop first questions that repeat one kept or earlier in this
        round; then check each conversation's turns in order, up to its first dropped one."""
        await asyncio.gather(*(self._generate(c) for c in planned))
        seen = filters.DuplicateIndex(self.config.duplicate_jaccard)
        for c in self.conversations:
            if c.kept:
                seen.add(c.turns[0].text, c.passage.lang)
        for c in planned:
            if not c.turns:
                continue
            first = c.turns[0]
            self.asked.setdefault(c.passage.key, []).append(first.text)
            if first.candidate.dropped is not None:
                continue
            lang = c.passage.lang
            if not self._filter("near_duplicate", seen.duplicate(first.text, lang), first.candidate):
                seen.add(first.text, lang)
        await asyncio.gather(*(self._check_turns(c) for c in planned))
        self.conversations += planned

    async def _generate(self, c: Conversation) -> None:
        lang = c.passage.lang
        messages = CONVERSATION[lang].messages(
            passages=passage_block((c.passage,)),
            avoid=avoid_block(lang, self.asked.get(c.passage.key, [])[-ASKED_IN_PROMPT:]),
            follow_ups=str(self.config.follow_ups),
        )
        reply, failure = await self._ask(messages, lambda t: parse_conversation(t, self.config.follow_ups))
        if self._filter("llm_failed", reply is None, c, failure or ""):
            return
        assert reply is not None
        for text, answer, standalone in reply:
            if lang == "fa":
                text, answer = filters.persian_letters(text), filters.persian_letters(answer)
                standalone = filters.persian_letters(standalone) if standalone is not None else None
            question = standalone or text
            candidate = Candidate(c.index, "factoid", (c.passage,), c.ordinal, lang, question, answer)
            earlier = [t.text for t in c.turns]
            c.turns.append(Exchange(text, candidate))
            if standalone is None:
                self._screen(candidate)
            else:
                self._screen(candidate, also=(text,))
                if candidate.dropped is None:
                    alone = not filters.leans_on(text, standalone, earlier, lang)
                    self._filter("self_contained", alone, candidate, text)
            if candidate.dropped is not None:
                return  # later turns may lean on this one: the conversation ends before it

    async def _check_turns(self, c: Conversation) -> None:
        """The LLM checks of each screened turn in order, until one drops it (later ones cost no call)."""
        for turn in c.turns:
            if turn.candidate.dropped is not None:
                return
            await self._check(turn.candidate)

    def selected(self) -> list[Conversation]:
        return [c for c in self.conversations if c.kept][: self.target]

    def rows(self) -> list[dict[str, Any]]:
        return [c.row(self.config.seed, self.config.llm.model) for c in self.selected()]

    def report(self) -> dict[str, Any]:
        """Conversations asked for, generated and kept (the ``n``... keys a question set's report has, counted
        in conversations), and per turn what each filter dropped."""
        selected = self.selected()
        passed = sum(c.kept for c in self.conversations)
        turns = [t for c in selected for t in c.kept_turns]
        dropped = Counter(t.candidate.dropped for c in self.conversations for t in c.turns)
        del dropped[None]
        dropped.update(c.dropped for c in self.conversations if c.dropped)
        return {
            "n": self.target,
            "kept": len(selected),
            "shortfall": self.target - len(selected),
            "generated": len(self.conversations),
            "passed_filters": passed,
            "surplus": passed - len(selected),
            "rounds": self.rounds,
            "attempt_budget": self.budget,
            "by_kind": {
                "conversation": {
                    "target": self.target,
                    "generated": len(self.conversations),
                    "passed_filters": passed,
                    "kept": len(selected),
                    "dropped": dict(Counter(c.ended_by for c in self.conversations if c.ended_by)),
                }
            },
            "turns": {
                "generated": sum(len(c.turns) for c in self.conversations),
                "kept": len(turns),
                "follow_ups": len(turns) - len(selected),
            },
            "dropped": {r: dropped[r] for r in filters.REASONS},
            "filters": self.filter_table(),
            "languages": dict(Counter(c.passage.lang for c in selected)),
            "passages": {
                "documents": len(self.corpus),
                "documents_with_passages": len(self.by_doc),
                "windows": sum(len(ps) for ps in self.by_doc.values()),
                "documents_asked": len({c.passage.doc_id for c in self.conversations}),
            },
            "corpus": {"source": self.corpus.source, "fingerprint": self.corpus.fingerprint()},
            "settings": self.config.public(),
            "notes": [],
        }
