"""History as a searched stage (a pipeline's ``conversation:``): what a question of a conversation searches.

A follow-up such as «ومتى توفي؟» ("and when did he die?") cannot find its passage from its own words. Before
query expansion, each question becomes a ``SearchedQuery``:

- ``none``: the question alone;
- ``concat``: the follow-up and the window's earlier turns as two weighted parts, the follow-up's share
  ``weight``: BM25's query term weights and the dense query vector (the normalized weighted sum of each
  part's vector) are mixed by part, so the history helps without drowning the follow-up;
- ``llm``: the helper LLM condenses follow-up and history into one standalone question in the
  conversation's language (the history fenced as data), cached and counted under the purpose
  ``conversation_rewrite``; a failed rewrite falls back to ``concat`` and is counted as a stage error.

A question without history searches its own words whatever the setting: exactly what it searched before the
stage existed. Nothing here shapes an index.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Hashable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from composer.data.conversations import as_turns, over_limit
from composer.data.fields import Where
from composer.data.types import Question, StageError, Turn
from composer.errors import InputError
from composer.llm.client import LLMClient
from composer.llm.parse import parse_step_back
from composer.llm.prompt import conversation_language, transcript
from composer.llm.spend import purpose
from composer.llm.sync import run_sync
from composer.retrieval.config import ConversationConfig
from composer.retrieval.prompts import CONDENSE

HistoryLike = Iterable[Turn | Mapping[str, Any]]
"""A conversation's earlier turns as ``Turn``s or chat messages: ``{role, text}`` or ``{role, content}``."""

REWRITE_PURPOSE = "conversation_rewrite"
"""The purpose the ``llm`` rewrite's requests are counted under (``composer.llm.spend``)."""

HISTORY_OPEN, HISTORY_CLOSE = "⟪", "⟫"
"""How a ``concat`` query shows its history part: "follow-up ⟪history⟫"."""


def history_turns(history: HistoryLike | None) -> tuple[Turn, ...]:
    """``history`` as Turns, oldest first, read as question files read it (``as_turns``: ``{role, text}``,
    ``{role, content}``, LangChain's shapes; system messages dropped) and held to the same caps."""
    turns = as_turns(list(history or ()), Where("history", 0, tabular=False), "history")
    if (too_long := over_limit(turns)) is not None:
        raise InputError(too_long, field="history")
    return turns


@dataclass(frozen=True)
class SearchedQuery:
    """What is searched for one question: weighted ``parts`` (text, share), the question's own first.

    One part of weight 1 is a plain query, searched (and memoized) exactly as its text always was."""

    parts: tuple[tuple[str, float], ...]

    @classmethod
    def plain(cls, text: str) -> SearchedQuery:
        return cls(((text, 1.0),))

    @property
    def weighted(self) -> bool:
        return len(self.parts) > 1

    @property
    def text(self) -> str:
        """As traces and samples.csv show it: the question, then any history part marked "⟪...⟫"."""
        head, *rest = (text for text, _ in self.parts)
        return " ".join([head, *(f"{HISTORY_OPEN}{r}{HISTORY_CLOSE}" for r in rest)])

    @property
    def reading(self) -> str:
        """The parts as a person reads them, history first: what a reranker or an expansion is given, since
        a follow-up alone ("when did he die?") cannot be judged against a passage."""
        return "\n".join(text for text, _ in reversed(self.parts))

    @property
    def key(self) -> str:
        """The memo key of its candidate lists: a plain query's text; a weighted one's parts and shares."""
        if not self.weighted:
            return self.parts[0][0]
        return "\x00" + json.dumps(self.parts, ensure_ascii=False)


def window_turns(history: Sequence[Turn], config: ConversationConfig) -> tuple[Turn, ...]:
    """The turns the stage reads: from the ``window``-th last user turn on, assistant turns only when
    ``assistant`` is set."""
    if config.window == 0:
        return ()
    users = [i for i, t in enumerate(history) if t.role == "user"]
    start = users[-config.window] if len(users) >= config.window else 0
    return tuple(t for t in history[start:] if config.assistant or t.role == "user")


def concat_query(question: str, history: Sequence[Turn], config: ConversationConfig) -> SearchedQuery:
    """The follow-up with ``weight`` of the query and the window's turns, joined, with the rest."""
    turns = window_turns(history, config)
    if not turns or config.weight >= 1.0:
        return SearchedQuery.plain(question)
    joined = " ".join(" ".join(t.text.split()) for t in turns)
    return SearchedQuery(((question, config.weight), (joined, round(1.0 - config.weight, 6))))


class ConversationStage:
    """Turns questions into what is searched for one ``conversation:`` setting. ``client`` (the helper LLM)
    is needed for ``llm`` only; ``memo`` keeps rewrites across trials (failures are not kept)."""

    def __init__(
        self,
        config: ConversationConfig,
        client: LLMClient | None = None,
        *,
        memo: MutableMapping[Hashable, str] | None = None,
    ) -> None:
        if config.rewrite == "llm" and client is None:
            raise InputError("conversation rewrite 'llm' needs an LLM: set generation.model",
                             field="conversation.model")
        self.config = config
        self.client = client
        self.memo: MutableMapping[Hashable, str] = memo if memo is not None else {}

    def queries(self, questions: Sequence[Question]) -> tuple[list[SearchedQuery], dict[str, StageError]]:
        """Each question's searched query, and the questions whose rewrite failed (searched by concat)."""
        cfg = self.config
        if cfg.rewrite == "none":
            return [SearchedQuery.plain(q.question) for q in questions], {}
        if cfg.rewrite == "concat":
            return [concat_query(q.question, q.history, cfg) for q in questions], {}
        return run_sync(self._rewritten(questions))

    async def _rewritten(
        self, questions: Sequence[Question]
    ) -> tuple[list[SearchedQuery], dict[str, StageError]]:
        failed: dict[str, StageError] = {}

        async def one(q: Question) -> SearchedQuery:
            turns = window_turns(q.history, self.config)
            if not turns:
                return SearchedQuery.plain(q.question)
            rewritten, error = await self._rewrite(q.question, turns)
            if rewritten is None:
                failed[q.id] = error
                return concat_query(q.question, q.history, self.config)
            return SearchedQuery.plain(rewritten)

        with purpose(REWRITE_PURPOSE):
            queries = await asyncio.gather(*(one(q) for q in questions))
        return list(queries), failed

    async def _rewrite(self, question: str, turns: tuple[Turn, ...]) -> tuple[str | None, StageError]:
        """The standalone question (None on failure, with why); the model's reply is cached by its client."""
        none = StageError(REWRITE_PURPOSE, "", "")
        assert self.client is not None  # checked in __init__
        config = self.client.config
        slot = (config.model, config.api_base, question, turns)
        if slot in self.memo:
            return self.memo[slot], none
        lang = conversation_language(question, turns)
        messages = CONDENSE[lang].messages(history=transcript(turns, lang), question=question)
        result = await self.client.acomplete(messages, validate=parse_step_back)
        if not result.ok or result.text is None:
            return None, StageError(REWRITE_PURPOSE, result.error_kind or "empty", (result.error or "")[:500])
        rewritten = " ".join(parse_step_back(result.text).split())
        self.memo[slot] = rewritten
        return rewritten, none


def follow_up_warning(questions: Iterable[Question], config: ConversationConfig) -> str | None:
    """With ``rewrite: none``, the line that says how many follow-ups are searched from their own words
    alone (None when there are none, or the history is used)."""
    if config.rewrite != "none":
        return None
    n = sum(q.is_follow_up for q in questions)
    if not n:
        return None
    return (f"{n} follow-up question(s) are searched from their own words alone (conversation.rewrite: "
            "none); set conversation.rewrite to concat or llm to search with their history")
