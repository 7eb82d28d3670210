"""Generating a question set: rounds of generation and filtering until every kind has its share.

Everything is a function of the corpus, the settings and the model's replies: passages come in a seeded
order, candidates are planned, numbered and filtered in that order, and every reply goes through the LLM
client's cache. A rerun with the same seed therefore replays from the cache and sends no request.

A round visits each passage (or pair) at most once, so a prompt can list the questions already written
from its passage and ask for a different one; rounds go on until every kind reaches its target or
``max_attempts * n`` generation calls are spent (a shortfall is reported, never hidden).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from composer.data.types import Corpus
from composer.errors import ComposerError
from composer.llm.client import LLMClient
from composer.llm.sync import run_sync
from composer.llm.usage import track_usage
from composer.synth import filters
from composer.synth.candidate import Candidate
from composer.synth.config import KINDS, SynthConfig, allocate
from composer.synth.conversations import ConversationRun
from composer.synth.passages import Lookahead, Passage, cycled, stratified
from composer.synth.prompts import GENERATE, avoid_block, passage_block
from composer.synth.related import related_pairs
from composer.synth.replies import parse_generated
from composer.synth.screening import Screening

PRIOR_KEEP_RATE = 0.8
"""Assumed share of candidates that pass the filters, before a kind has shown its own."""
ASKED_IN_PROMPT = 10
"""At most this many earlier questions from the same passage are listed in a prompt."""


@dataclass
class SynthOutcome:
    """The kept rows (``load_questions`` reads them as they are) and the report of the whole run."""

    rows: list[dict[str, Any]]
    report: dict[str, Any]


def require_questions(outcome: SynthOutcome) -> None:
    """Raise a one-line ComposerError when nothing was kept (a dead server, a model that never follows the
    format): no empty set is written or cached, and the reasons are in the message."""
    if outcome.rows:
        return
    report = outcome.report
    reasons = ", ".join(f"{r} {n}" for r, n in report["dropped"].items() if n) or "none"
    failures = ", ".join(
        f"{k} {v['failed_calls']}" for k, v in report["error_rates"]["kinds"].items() if v["failed_calls"]
    )
    raise ComposerError(
        f"no question was kept: {report['generated']} generated, dropped: {reasons}"
        + (f"; failed LLM calls: {failures}" if failures else "")
    )


def synthesize(corpus: Corpus, config: SynthConfig, client: LLMClient) -> SynthOutcome:
    """Generate a question set from ``corpus`` (the sync facade over ``asynthesize``)."""
    return run_sync(asynthesize(corpus, config, client))


async def asynthesize(corpus: Corpus, config: SynthConfig, client: LLMClient) -> SynthOutcome:
    started = time.perf_counter()
    with track_usage() as usage:
        run: _Run | ConversationRun = (
            ConversationRun(corpus, config, client) if config.conversations else _Run(corpus, config, client)
        )
        await run.execute()
    report = run.report()
    report["llm"] = usage.to_dict()
    report["error_rates"] = usage.error_rates()
    report["seconds"] = round(time.perf_counter() - started, 3)
    return SynthOutcome(run.rows(), report)


class _Run(Screening):
    """A question set's rounds: kinds planned against their targets, passages (or pairs) visited in turn."""

    def __init__(self, corpus: Corpus, config: SynthConfig, client: LLMClient) -> None:
        super().__init__(corpus, config, client)
        by_doc = self.by_doc
        self.pairs = related_pairs([p for ps in by_doc.values() for p in ps])
        self.notes: list[str] = []
        mix = dict(config.mix)
        if not self.pairs and mix["multi_hop"] > 0:
            self.notes.append(
                "no related passage pairs in the corpus: multi_hop's share went to the other kinds"
            )
            mix["multi_hop"] = 0.0
        self.targets = allocate(config.n, {k: w / sum(mix.values()) for k, w in mix.items()})
        self.budget = math.ceil(config.max_attempts * config.n)
        self.singles = Lookahead(stratified(by_doc, config.seed))
        self.pair_stream = Lookahead(cycled(self.pairs, config.seed))
        self.candidates: list[Candidate] = []
        self.kept: dict[str, list[Candidate]] = {k: [] for k in KINDS}
        self.generated: Counter[str] = Counter()
        self.asked: dict[str, list[str]] = {}
        self.visits: Counter[tuple[str, str]] = Counter()
        self.rounds = 0

    # -- planning --

    async def execute(self) -> None:
        while len(self.candidates) < self.budget:
            need: dict[str, int] = {
                k: self.targets[k] - len(self.kept[k]) for k in KINDS if len(self.kept[k]) < self.targets[k]
            }
            if not need:
                return
            planned = self._plan(need)
            if not planned:
                return
            self.rounds += 1
            await self._round(planned)

    def _plan(self, need: dict[str, int]) -> list[Candidate]:
        """This round's candidates: enough of each short kind for its keep rate so far, interleaved so a
        cut by the budget or a repeat visit falls evenly, and each passage (or pair) visited once."""
        slots: list[tuple[float, int, str]] = []
        for kind, missing in need.items():
            rate = (len(self.kept[kind]) + 2 * PRIOR_KEEP_RATE) / (self.generated[kind] + 2)
            count = math.ceil(missing / max(rate, 0.2))
            slots += [((i + 0.5) / count, KINDS.index(kind), kind) for i in range(count)]
        planned: list[Candidate] = []
        seen: set[str] = set()
        for _, _, kind in sorted(slots):
            if len(self.candidates) + len(planned) >= self.budget:
                break
            stream: Lookahead[Any] = self.pair_stream if kind == "multi_hop" else self.singles
            item = stream.peek()
            passages: tuple[Passage, ...] = item if kind == "multi_hop" else (item,)
            key = "|".join(p.key for p in passages)
            if key in seen:
                continue  # a repeat visit waits for the next round, which knows this one's questions
            seen.add(key)
            stream.take()
            ordinal = self.visits[(kind, key)]
            self.visits[(kind, key)] += 1
            planned.append(
                Candidate(len(self.candidates) + len(planned), kind, passages, ordinal, passages[0].lang)
            )
        return planned

    # -- one round --

    async def _round(self, planned: list[Candidate]) -> None:
        """Generate and screen concurrently; then, in candidate order, drop near-duplicates of questions
        already kept or earlier in this round (before the checks, which cost calls); then check."""
        await asyncio.gather(*(self._generate(c) for c in planned))
        seen = filters.DuplicateIndex(self.config.duplicate_jaccard)
        for c in (c for kind in KINDS for c in self.kept[kind]):
            seen.add(c.question or "", c.lang)
        for c in planned:
            if c.question is not None:
                self.asked.setdefault(c.key, []).append(c.question)
            if c.dropped is None:
                assert c.question is not None
                if not self._filter("near_duplicate", seen.duplicate(c.question, c.lang), c):
                    seen.add(c.question, c.lang)
        await asyncio.gather(*(self._check(c) for c in planned if c.dropped is None))
        for c in planned:
            self.candidates.append(c)
            self.generated[c.kind] += 1
            if c.dropped is None:
                self.kept[c.kind].append(c)

    async def _generate(self, c: Candidate) -> None:
        with_answer = c.kind != "unanswerable"
        asked = self.asked.get(c.key, [])[-ASKED_IN_PROMPT:]
        messages = GENERATE[c.kind][c.lang].messages(
            passages=passage_block(c.passages), avoid=avoid_block(c.lang, asked)
        )
        reply, failure = await self._ask(messages, lambda t: parse_generated(t, with_answer=with_answer))
        if self._filter("llm_failed", reply is None, c, failure or ""):
            return
        assert reply is not None
        question, answer = reply
        if c.lang == "fa":
            question = filters.persian_letters(question)
            answer = filters.persian_letters(answer) if answer is not None else None
        c.question, c.answer = question, answer
        self._screen(c)

    # -- results --

    def selected(self) -> list[Candidate]:
        """Each kind's first kept candidates up to its target; a kind that fell short is made up from the
        other kinds' extra ones, in generation order, so the set reaches ``n`` whenever it can."""
        chosen = [c for k in KINDS for c in self.kept[k][: self.targets[k]]]
        extra = sorted((c for k in KINDS for c in self.kept[k][self.targets[k] :]), key=lambda c: c.index)
        chosen += extra[: max(0, self.config.n - len(chosen))]
        return sorted(chosen, key=lambda c: c.index)

    def rows(self) -> list[dict[str, Any]]:
        return [c.row(self.config.seed, self.config.llm.model) for c in self.selected()]

    def report(self) -> dict[str, Any]:
        selected = self.selected()
        chosen = Counter(c.kind for c in selected)
        by_kind = {
            k: {
                "target": self.targets[k],
                "generated": self.generated[k],
                "passed_filters": len(self.kept[k]),
                "kept": chosen[k],
                "dropped": dict(Counter(c.dropped for c in self.candidates if c.kind == k and c.dropped)),
            }
            for k in KINDS
        }
        dropped = Counter(c.dropped for c in self.candidates if c.dropped)
        windows = [p for ps in self.by_doc.values() for p in ps]
        asked_docs = {p.doc_id for c in self.candidates for p in c.passages}
        return {
            "n": self.config.n,
            "kept": len(selected),
            "shortfall": self.config.n - len(selected),
            "generated": len(self.candidates),
            "passed_filters": sum(len(v) for v in self.kept.values()),
            "surplus": sum(len(v) for v in self.kept.values()) - len(selected),
            "rounds": self.rounds,
            "attempt_budget": self.budget,
            "by_kind": by_kind,
            "dropped": {r: dropped[r] for r in filters.REASONS},
            "filters": self.filter_table(),
            "languages": dict(Counter(c.lang for c in selected)),
            "passages": {
                "documents": len(self.corpus),
                "documents_with_passages": len(self.by_doc),
                "windows": len(windows),
                "related_pairs": len(self.pairs),
                "documents_asked": len(asked_docs),
            },
            "corpus": {"source": self.corpus.source, "fingerprint": self.corpus.fingerprint()},
            "settings": self.config.public(),
            "notes": self.notes,
        }
