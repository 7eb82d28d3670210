"""An LLM reranker beside the cross-encoder: pointwise (a 0-3 grade per passage) or listwise (one ranking)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from functools import partial
from typing import Literal

from composer.data.types import Hit
from composer.errors import ConfigError
from composer.llm.client import LLMClient
from composer.llm.parse import parse_ranking, parse_score
from composer.llm.prompt import numbered, prompt_language
from composer.llm.sync import run_sync
from composer.retrieval.prompts import RERANK_LISTWISE, RERANK_POINTWISE

RerankMode = Literal["pointwise", "listwise"]


class LLMReranker:
    """Reorders the first ``top_n`` hits that have text; the rest follow unchanged.

    Pointwise costs one call per passage and scores are the grades (ties keep the retriever's order);
    listwise costs one call per question and scores count down from ``top_n``. When a call fails the
    retriever's order is kept (the failure is counted in the client's usage), so a trial never breaks.
    """

    name = "llm"

    def __init__(
        self,
        client: LLMClient,
        mode: RerankMode = "listwise",
        top_n: int = 10,
        max_chars: int = 1500,
    ) -> None:
        if mode not in ("pointwise", "listwise"):
            raise ConfigError(
                f"unknown LLM rerank mode {mode!r}; expected pointwise or listwise", field="rerank.mode"
            )
        if top_n < 1:
            raise ConfigError("rerank top_n must be >= 1", field="rerank.top_n")
        self.client = client
        self.mode = mode
        self.top_n = top_n
        self.max_chars = max_chars

    async def arerank(self, question: str, hits: Sequence[Hit]) -> list[Hit]:
        picked = [i for i, h in enumerate(hits[: self.top_n]) if h.text]
        head = [hits[i] for i in picked]
        tail = [h for i, h in enumerate(hits) if i not in set(picked)]
        if len(head) < 2:
            return list(hits)
        passages = [" ".join((h.text or "").split())[: self.max_chars] for h in head]
        if self.mode == "pointwise":
            grades = await self._grades(question, passages)
            if grades is None:
                return list(hits)
            n = len(head)
            # Equal grades keep the retriever's order: a tie-break far below one grade step.
            scored = [
                Hit(h.id, g + (n - i) / (n * 1000), h.text, h.doc_id)
                for i, (h, g) in enumerate(zip(head, grades, strict=True))
            ]
            reranked = sorted(scored, key=lambda h: -h.score)
        else:
            order = await self._ranking(question, passages)
            if order is None:
                return list(hits)
            reranked = [
                Hit(head[i].id, float(len(head) - pos), head[i].text, head[i].doc_id)
                for pos, i in enumerate(order)
            ]
        floor = min(h.score for h in reranked)
        # Hits below the reranked head score lower than all of it, in their original order.
        return reranked + [Hit(h.id, floor - 1 - j, h.text, h.doc_id) for j, h in enumerate(tail)]

    async def _grades(self, question: str, passages: list[str]) -> list[float] | None:
        lang = prompt_language(question)
        validate = partial(parse_score, low=0, high=3)
        results = await asyncio.gather(
            *(
                self.client.acomplete(
                    RERANK_POINTWISE[lang].messages(question=question, passage=p), validate=validate
                )
                for p in passages
            )
        )
        if not all(r.ok and r.text is not None for r in results):
            return None
        return [parse_score(r.text or "", 0, 3) for r in results]

    async def _ranking(self, question: str, passages: list[str]) -> list[int] | None:
        lang = prompt_language(question)
        messages = RERANK_LISTWISE[lang].messages(question=question, passages=numbered(passages))
        validate = partial(parse_ranking, count=len(passages))
        result = await self.client.acomplete(messages, validate=validate)
        if not result.ok or result.text is None:
            return None
        return parse_ranking(result.text, len(passages))

    async def arerank_many(self, items: Sequence[tuple[str, Sequence[Hit]]]) -> list[list[Hit]]:
        return list(await asyncio.gather(*(self.arerank(q, h) for q, h in items)))

    def rerank(self, question: str, hits: Sequence[Hit]) -> list[Hit]:
        return run_sync(self.arerank(question, hits))

    def rerank_many(self, items: Sequence[tuple[str, Sequence[Hit]]]) -> list[list[Hit]]:
        return run_sync(self.arerank_many(items))
