"""Query expansion before search: multi-query paraphrases and a step-back question (their lists fused with
the question's by RRF), and HyDE passages."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from composer.errors import ConfigError
from composer.llm.client import LLMClient
from composer.llm.parse import parse_queries, parse_step_back
from composer.llm.prompt import prompt_language
from composer.llm.sync import run_sync
from composer.retrieval.prompts import HYDE, MULTI_QUERY, STEP_BACK

ExpansionMethod = Literal["none", "multi_query", "step_back", "hyde"]
EXPANSION_METHODS: tuple[str, ...] = get_args(ExpansionMethod)


@dataclass(frozen=True)
class Expansion:
    """What to search for one question: ``queries`` embed as queries (the original first), ``passages``
    (HyDE's hypothetical answer) embed as passages; the lists of several queries are fused by RRF.
    ``failed`` means the LLM call failed and only the original question is searched."""

    question: str
    queries: tuple[str, ...]
    passages: tuple[str, ...] = ()
    failed: bool = False


class QueryExpander:
    """Expands questions with ``client``'s model, at its temperature (the pipeline's helper client runs at
    0, so every trial asking the same shares the cached expansion). ``memo`` keeps expansions across
    expanders (a study's workspace), keyed by model, method, n and question; failures are not kept."""

    def __init__(
        self,
        client: LLMClient | None,
        method: ExpansionMethod = "none",
        n: int = 3,
        *,
        memo: MutableMapping[Hashable, Expansion] | None = None,
    ) -> None:
        if method not in EXPANSION_METHODS:
            raise ConfigError(
                f"unknown query expansion {method!r}; expected one of {list(EXPANSION_METHODS)}",
                field="query_expansion.method",
            )
        if method != "none" and client is None:
            raise ConfigError(
                f"query expansion {method!r} needs an LLM: set generation.model", field="generation.model"
            )
        if n < 1:
            raise ConfigError("the number of expanded queries must be >= 1", field="query_expansion.n")
        self.client = client
        self.method = method
        self.n = n
        self.memo: MutableMapping[Hashable, Expansion] = memo if memo is not None else {}

    async def aexpand(self, question: str) -> Expansion:
        if self.method == "none" or self.client is None:
            return Expansion(question, (question,))
        lang = prompt_language(question)
        if self.method == "multi_query":
            messages = MULTI_QUERY[lang].messages(question=question, n=str(self.n))
            result = await self.client.acomplete(messages, validate=parse_queries)
            if not result.ok or result.text is None:
                return Expansion(question, (question,), failed=True)
            extra = [q for q in parse_queries(result.text) if q != question][: self.n]
            return Expansion(question, (question, *extra))
        if self.method == "step_back":
            result = await self.client.acomplete(STEP_BACK[lang].messages(question=question),
                                                 validate=parse_step_back)
            if not result.ok or result.text is None:
                return Expansion(question, (question,), failed=True)
            general = parse_step_back(result.text)
            return Expansion(question, (question,) if general == question else (question, general))
        result = await self.client.acomplete(HYDE[lang].messages(question=question))
        if not result.ok or result.text is None:
            return Expansion(question, (question,), failed=True)
        return Expansion(question, (question,), (result.text.strip(),))

    async def aexpand_many(self, questions: Sequence[str]) -> list[Expansion]:
        model = (self.client.config.model, self.client.config.api_base) if self.client is not None else None
        n = self.n if self.method == "multi_query" else 0  # only multi-query's expansions depend on n
        slots = [(model, self.method, n, q) for q in questions]
        failed: dict[str, Expansion] = {}
        todo = list(
            dict.fromkeys(q for q, slot in zip(questions, slots, strict=True) if slot not in self.memo)
        )
        for question, expansion in zip(
            todo, await asyncio.gather(*(self.aexpand(q) for q in todo)), strict=True
        ):
            if not expansion.failed:
                self.memo[(model, self.method, n, question)] = expansion
            else:
                failed[question] = expansion
        return [self.memo.get(slot) or failed[q] for q, slot in zip(questions, slots, strict=True)]

    def expand_many(self, questions: Sequence[str]) -> list[Expansion]:
        return run_sync(self.aexpand_many(questions))
