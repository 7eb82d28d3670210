"""What every generated question goes through, whatever wrote it (a single question or a conversation's
turn): the passages it may come from, the LLM calls that parse their replies, the deterministic filters and
the LLM checks, each verdict counted per filter."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from composer.data.types import Corpus
from composer.errors import InputError
from composer.llm.client import LLMClient
from composer.synth import filters
from composer.synth.candidate import Candidate
from composer.synth.config import EXTRACTIVE, SynthConfig
from composer.synth.passages import Passage, corpus_passages
from composer.synth.prompts import ANSWERED, CLOSED_BOOK, SUPPORTED, passage_block
from composer.synth.replies import parse_check, parse_closed_book
from composer.synth.spans import find_span

T = TypeVar("T")


class Droppable(Protocol):
    """What a filter drops: a question, or a conversation whose generation failed."""

    def drop(self, reason: str, detail: str = "") -> None: ...


class Screening:
    """A generation run's corpus passages, LLM client and filter counters, and the filters themselves."""

    def __init__(self, corpus: Corpus, config: SynthConfig, client: LLMClient) -> None:
        self.corpus, self.config, self.client = corpus, config, client
        by_doc = corpus_passages(corpus, config.min_passage_chars, config.max_passage_chars, config.lang)
        if not by_doc:
            raise InputError(
                f"no document has a passage of at least {config.min_passage_chars} characters "
                "(lower min_passage_chars?)",
                path=corpus.source,
            )
        self.by_doc: dict[str, list[Passage]] = by_doc
        self.filter_counts: dict[str, Counter[str]] = {r: Counter() for r in filters.REASONS}

    def filter_table(self) -> dict[str, dict[str, Any]]:
        """Each filter's candidates checked and dropped, and the share it kept (None: never ran)."""
        return {
            r: {
                "checked": n["checked"],
                "dropped": n["dropped"],
                "kept_share": round(1 - n["dropped"] / n["checked"], 4) if n["checked"] else None,
            }
            for r, n in self.filter_counts.items()
        }

    def _filter(self, reason: str, failed: bool, c: Droppable, detail: str = "") -> bool:
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

    def _screen(self, c: Candidate, also: Sequence[str] = ()) -> None:
        """The deterministic filters, in order; the first that fails drops the candidate. ``also``: more
        texts the user reads, held to the passage's script (a follow-up as asked, beside its rewrite)."""
        cfg = self.config
        question, answer = c.question or "", c.answer
        texts = [question, *also] + ([answer] if answer is not None and c.kind == "conceptual" else [])
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
