"""Query expansion (none, multi-query, HyDE) and the reciprocal rank fusion that merges its result lists."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from composer.data.types import Hit, Run
from composer.errors import ConfigError
from composer.generation.prompts import HYDE, MULTI_QUERY
from composer.llm.client import LLMClient
from composer.llm.parse import parse_queries
from composer.llm.prompt import prompt_language
from composer.llm.sync import run_sync

ExpansionMethod = Literal["none", "multi_query", "hyde"]
EXPANSION_METHODS: tuple[str, ...] = get_args(ExpansionMethod)


@dataclass(frozen=True)
class Expansion:
    """What to search for one question: ``queries`` embed as queries (the original first), ``passages``
    (HyDE's hypothetical answer) embed as passages. Search each, then ``fuse_rankings`` the hit lists.
    ``failed`` means the LLM call failed and only the original question is searched."""

    question: str
    queries: tuple[str, ...]
    passages: tuple[str, ...] = ()
    failed: bool = False


class QueryExpander:
    """Expands questions with ``client``'s model, at its temperature (the pipeline's helper client runs at
    0, so every trial asking the same shares the cached expansion)."""

    def __init__(self, client: LLMClient | None, method: ExpansionMethod = "none", n: int = 3) -> None:
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
        result = await self.client.acomplete(HYDE[lang].messages(question=question))
        if not result.ok or result.text is None:
            return Expansion(question, (question,), failed=True)
        return Expansion(question, (question,), (result.text.strip(),))

    async def aexpand_many(self, questions: Sequence[str]) -> list[Expansion]:
        return list(await asyncio.gather(*(self.aexpand(q) for q in questions)))

    def expand_many(self, questions: Sequence[str]) -> list[Expansion]:
        return run_sync(self.aexpand_many(questions))


def fuse_rankings(rankings: Sequence[Sequence[Hit]], *, k: int = 60, limit: int | None = None) -> list[Hit]:
    """Reciprocal rank fusion of ranked hit lists: score(id) = sum over lists of 1 / (k + rank).

    Ranks are 1-based positions in each list as given; an id repeated within one list counts at its best
    rank. Ties keep first-seen order. The fused hit keeps the first non-empty text and doc_id seen.
    """
    scores: dict[str, float] = {}
    first: dict[str, Hit] = {}
    for ranking in rankings:
        seen: set[str] = set()
        for rank, hit in enumerate(ranking, 1):
            if hit.id in seen:
                continue
            seen.add(hit.id)
            scores[hit.id] = scores.get(hit.id, 0.0) + 1.0 / (k + rank)
            known = first.get(hit.id)
            if known is None:
                first[hit.id] = hit
            elif (known.text is None and hit.text is not None) or (
                known.doc_id is None and hit.doc_id is not None
            ):
                first[hit.id] = Hit(known.id, known.score, known.text or hit.text, known.doc_id or hit.doc_id)
    order = sorted(scores, key=lambda i: -scores[i])  # stable: ties keep first-seen order
    fused = [Hit(i, scores[i], first[i].text, first[i].doc_id) for i in order]
    return fused[:limit] if limit is not None else fused


def rrf_fuse(runs: Sequence[Run], *, k: int = 60, limit: int | None = None) -> Run:
    """Fuse several runs over the same questions (one per expanded query) question by question."""
    qids = list(dict.fromkeys(qid for run in runs for qid in run))
    return {qid: fuse_rankings([run[qid] for run in runs if qid in run], k=k, limit=limit) for qid in qids}
