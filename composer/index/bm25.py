"""BM25 as sparse vectors over our own ar/fa/en tokens; Qdrant supplies the IDF half (``Modifier.Idf``).

Documents carry the saturated, length-normalized term frequency ``tf·(k1+1) / (tf + k1·(1−b+b·len/avglen))``,
queries weight each distinct token 1.0, and the IDF modifier multiplies in ``idf(t)`` from the collection's
own statistics at query time, so the dot product is classic BM25. Qdrant's built-in ``Bm25`` cannot be used:
it knows neither our Arabic/Persian letter folding nor Persian at all.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

from composer.text import tokenize

# Token ids must mean the same thing in every index a process ever reopens: bump on any change to
# tokenization, hashing or weighting so stale indexes are refused instead of silently mis-scored.
SCHEME = "composer-bm25/v1: composer.text.tokenize(lang=detect, stopwords) + yeh/kaf fold + crc32"

# Persian and Arabic yeh/kaf are one letter each: a query whose language detection differs from the
# document's (short, mixed or Arabic-keyboard Persian) must still hash to the same ids.
_SCRIPT_NEUTRAL = str.maketrans({"ی": "ي", "ک": "ك"})


class SparseVector(NamedTuple):
    """Qdrant sparse vector: distinct uint32 token ids and their weights."""

    indices: list[int]
    values: list[float]


def token_id(token: str) -> int:
    """Stable uint32 id of a normalized token (crc32; a rare collision merges two terms)."""
    return zlib.crc32(token.translate(_SCRIPT_NEUTRAL).encode("utf-8"))


@dataclass(frozen=True)
class Bm25Encoder:
    """Turns texts into BM25 sparse vectors; ``to_dict`` is persisted with the index so queries match it.

    Stopwords are dropped: on ARCD that gains +0.001 hit@5 and on PersianQA +0.018 hit@1 / +0.007 hit@5
    (measured with Qdrant Edge, document level). Stemming is Snowball Arabic/English, none for Persian.
    """

    avglen: float
    k1: float = 1.2
    b: float = 0.75
    stem: bool = True
    stopwords: bool = True
    n_docs: int = 0

    @classmethod
    def fit(
        cls,
        texts: Iterable[str],
        *,
        stem: bool = True,
        stopwords: bool = True,
        k1: float = 1.2,
        b: float = 0.75,
    ) -> tuple[Bm25Encoder, list[SparseVector]]:
        """Learn the average document length from the corpus and encode it in the same pass."""
        docs = [_tokens(t, stem=stem, stopwords=stopwords) for t in texts]
        avglen = sum(map(len, docs)) / len(docs) if docs else 1.0
        enc = cls(avglen=max(avglen, 1.0), k1=k1, b=b, stem=stem, stopwords=stopwords, n_docs=len(docs))
        return enc, [enc._weigh(tokens) for tokens in docs]

    def tokens(self, text: str) -> list[str]:
        """The tokens this encoder indexes for ``text`` (language detected per text)."""
        return _tokens(text, stem=self.stem, stopwords=self.stopwords)

    def encode_documents(self, texts: Iterable[str]) -> list[SparseVector]:
        return [self._weigh(self.tokens(t)) for t in texts]

    def encode_queries(self, texts: Iterable[str]) -> list[SparseVector]:
        """1.0 per distinct token: repeated query words do not count twice, IDF does the weighting."""
        out = []
        for text in texts:
            ids = sorted({token_id(t) for t in self.tokens(text)})
            out.append(SparseVector(ids, [1.0] * len(ids)))
        return out

    def _weigh(self, tokens: Sequence[str]) -> SparseVector:
        tf = Counter(token_id(t) for t in tokens)
        norm = self.k1 * (1.0 - self.b + self.b * len(tokens) / self.avglen)
        ids = sorted(tf)
        return SparseVector(ids, [tf[i] * (self.k1 + 1.0) / (tf[i] + norm) for i in ids])

    def to_dict(self) -> dict[str, Any]:
        return {"scheme": SCHEME, **asdict(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Bm25Encoder:
        """Rebuild the encoder an index was built with; refuses stats from another token scheme."""
        if data.get("scheme") != SCHEME:
            raise ValueError(f"BM25 stats use scheme {data.get('scheme')!r}, this version needs {SCHEME!r}")
        return cls(
            avglen=float(data["avglen"]),
            k1=float(data["k1"]),
            b=float(data["b"]),
            stem=bool(data["stem"]),
            stopwords=bool(data["stopwords"]),
            n_docs=int(data["n_docs"]),
        )


def _tokens(text: str, *, stem: bool, stopwords: bool) -> list[str]:
    return tokenize(text, None, stopwords=stopwords, stem=stem)
