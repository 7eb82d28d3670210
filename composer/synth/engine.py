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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from composer.data.types import Corpus
from composer.errors import ComposerError, InputError
from composer.llm.client import LLMClient
from composer.llm.sync import run_sync
from composer.llm.usage import track_usage
from composer.synth import filters
from composer.synth.candidate import Candidate
from composer.synth.config import EXTRACTIVE, KINDS, SynthConfig, allocate
from composer.synth.passages import Passage, corpus_passages, cycled, stratified
from composer.synth.prompts import ANSWERED, CLOSED_BOOK, GENERATE, SUPPORTED, avoid_block, passage_block
from composer.synth.related import related_pairs
from composer.synth.replies import parse_check, parse_closed_book, parse_generated
from composer.synth.spans import find_span

T = TypeVar("T")

PRIOR_KEEP_RATE = 0.8
"""Assumed share of candidates that pass the filters, before a kind has shown its own."""
ASKED_IN_PROMPT = 10
"""At most this many earlier questions from the same passage are listed in a prompt."""


class _Lookahead(Generic[T]):
    """An endless iterator whose next item can be looked at without taking it."""

    def __init__(self, items: Iterator[T]) -> None:
        self._items = items
        self._next: T | None = None

    def peek(self) -> T:
        if self._next is None:
            self._next = next(self._items)
        return self._next

    def take(self) -> T:
        item = self.peek()
        self._next = None
        return item


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
        run = _Run(corpus, config, client)
        await run.execute()
    report = run.report()
    report["llm"] = usage.to_dict()
    report["error_rates"] = usage.error_rates()
    report["seconds"] = round(time.perf_counter() - started, 3)
    return SynthOutcome(run.rows(), report)


class _Run:
    def __init__(self, corpus: Corpus, config: SynthConfig, client: LLMClient) -> None:
        self.corpus, self.config, self.client = corpus, config, client
        by_doc = corpus_passages(corpus, config.min_passage_chars, config.max_passage_chars, config.lang)
        if not by_doc:
            raise InputError(
                f"no document has a passage of at least {config.min_passage_chars} characters "
                "(lower min_passage_chars?)",
                path=corpus.source,
            )
        self.by_doc = by_doc
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
        self.singles = _Lookahead(stratified(by_doc, config.seed))
        self.pair_stream = _Lookahead(cycled(self.pairs, config.seed))
        self.candidates: list[Candidate] = []
        self.kept: dict[str, list[Candidate]] = {k: [] for k in KINDS}
        self.generated: Counter[str] = Counter()
        self.asked: dict[str, list[str]] = {}
        self.visits: Counter[tuple[str, str]] = Counter()
        self.filter_counts: dict[str, Counter[str]] = {r: Counter() for r in filters.REASONS}
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
            stream: _Lookahead[Any] = self.pair_stream if kind == "multi_hop" else self.singles
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

    def _filter(self, reason: str, failed: bool, c: Candidate, detail: str = "") -> bool:
        """Count one filter's verdict on ``c``; drop it when it failed."""
        self.filter_counts[reason]["checked"] += 1
        if failed:
            self.filter_counts[reason]["dropped"] += 1
            c.drop(reason, detail)
        return failed

    async def _ask(
        self, messages: list[dict[str, str]], parse: Callable[[str], T], **params: Any
    ) -> tuple[T | None, str | None]:
        """(parsed reply, None), or (None, failure kind) when the client gave up."""
        result = await self.client.acomplete(messages, validate=parse, **params)
        if not result.ok or result.text is None:
            return None, result.error_kind or "other"
        return parse(result.text), None

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

    def _screen(self, c: Candidate) -> None:
        """The deterministic filters, in order; the first that fails drops the candidate."""
        cfg = self.config
        question, answer = c.question or "", c.answer
        texts = [question] + ([answer] if answer is not None and c.kind == "conceptual" else [])
        if self._filter("language", any(filters.wrong_script(t, c.lang) for t in texts), c):
            return
        max_words = (
            None
            if answer is None
            else (cfg.max_short_answer_words if c.kind in EXTRACTIVE else cfg.max_long_answer_words)
        )
        problem = filters.length_problem(
            question,
            answer,
            min_chars=cfg.min_question_chars,
            max_chars=cfg.max_question_chars,
            max_answer_words=max_words,
        )
        if self._filter("length", problem is not None, c, problem or ""):
            return
        if answer is None:
            return
        if c.kind in EXTRACTIVE:
            for i, p in enumerate(c.passages):
                found = find_span(p.text, answer, p.lang)
                if found is not None:
                    c.span = (i, *found)
                    c.answer = answer = p.text[found[0] : found[1]]
                    break
            if self._filter("span_not_found", c.span is None, c, answer):
                return
        self._filter("answer_in_question", filters.answer_in_question(question, answer), c, answer)

    async def _check(self, c: Candidate) -> None:
        """The LLM checks, at temperature 0 in the passage's language: supported by the passage (or, for an
        unanswerable question, not answered by it), then not answerable without it."""
        assert c.question is not None
        block = passage_block(c.passages)
        if c.answer is None:
            answered, failure = await self._ask(
                ANSWERED[c.lang].messages(passages=block, question=c.question),
                lambda t: parse_check(t, "answerable"),
                temperature=0.0,
            )
            if not self._filter("check_failed", failure is not None, c, failure or ""):
                self._filter("answered_by_passage", bool(answered), c)
            return
        supported, failure = await self._ask(
            SUPPORTED[c.lang].messages(passages=block, question=c.question, answer=c.answer),
            lambda t: parse_check(t, "supported"),
            temperature=0.0,
        )
        if self._filter("check_failed", failure is not None, c, failure or ""):
            return
        if self._filter("unsupported", not supported, c):
            return
        closed, failure = await self._ask(
            CLOSED_BOOK[c.lang].messages(question=c.question), parse_closed_book, temperature=0.0
        )
        if self._filter("check_failed", failure is not None, c, failure or ""):
            return
        matched = closed is not None and filters.closed_book_match(
            closed, c.answer, self.config.closed_book_f1, c.lang
        )
        self._filter("answerable_without_passage", matched, c, closed or "")

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
        filter_table = {
            r: {
                "checked": n["checked"],
                "dropped": n["dropped"],
                "kept_share": round(1 - n["dropped"] / n["checked"], 4) if n["checked"] else None,
            }
            for r, n in self.filter_counts.items()
        }
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
            "filters": filter_table,
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
