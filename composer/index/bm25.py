"""BM25 as sparse vectors over our own ar/fa/en tokens; Qdrant supplies the IDF half (``Modifier.Idf``).

Documents carry the saturated, length-normalized term frequency ``tf·(k1+1) / (tf + k1·(1−b+b·len/avglen))``
(with a title field, BM25F's weighted sum of the fields' normalized frequencies in place of ``tf``),
queries weight each distinct token 1.0, and the IDF modifier multiplies in ``idf(t)`` from the collection's
own statistics at query time, so the dot product is classic BM25. Qdrant's built-in ``Bm25`` cannot be used:
it knows neither our Arabic/Persian letter folding nor Persian at all.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

from composer.text import Language, detect_language
from composer.text.analyzers import Analyzer, AnalyzerName

# Token ids must mean the same thing in every index a process ever reopens: bump on any change to
# tokenization, hashing or weighting so stale indexes are refused instead of silently mis-scored.
SCHEME = "composer-bm25/v2: composer.text.analyzers + title field (BM25F) + yeh/kaf fold + crc32"

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

    ``analyzer``, ``stem`` and ``stopwords`` choose the tokens (``composer.text.analyzers``). With
    ``title_weight`` > 0 a document's title is a second field, weighted as in simple BM25F (Robertson,
    Zaragoza & Taylor 2004): each field's term frequency is length-normalized against that field's
    average, the two are summed with the title's weight, and the sum is saturated once, so a title word
    adds evidence without a document scoring twice for it. Titles are read in their text's language.
    """

    avglen: float
    k1: float = 1.2
    b: float = 0.75
    analyzer: AnalyzerName = "default"
    stem: bool = True
    stopwords: bool = True
    title_weight: float = 0.0
    avglen_title: float = 1.0
    n_docs: int = 0
    language: Language | None = None

    @classmethod
    def fit(
        cls,
        texts: Iterable[str],
        titles: Sequence[str] | None = None,
        *,
        analyzer: AnalyzerName = "default",
        stem: bool = True,
        stopwords: bool = True,
        k1: float = 1.2,
        b: float = 0.75,
        title_weight: float = 0.0,
    ) -> tuple[Bm25Encoder, list[SparseVector]]:
        """Learn the fields' average lengths from the corpus and encode it in the same pass."""
        analysis = Analyzer(analyzer, stem, stopwords)
        texts = list(texts)
        language = analysis.collection_language(texts)
        fields = _fields(analysis, language, texts, titles if title_weight > 0 else None)
        avglen = sum(len(t) for t, _ in fields) / len(fields) if fields else 1.0
        titled = [len(t) for _, t in fields if t]
        enc = cls(
            avglen=max(avglen, 1.0),
            k1=k1,
            b=b,
            analyzer=analyzer,
            stem=stem,
            stopwords=stopwords,
            title_weight=title_weight,
            avglen_title=max(sum(titled) / len(titled), 1.0) if titled else 1.0,
            n_docs=len(fields),
            language=language,
        )
        return enc, [enc._weigh(text, title) for text, title in fields]

    @property
    def analysis(self) -> Analyzer:
        return Analyzer(self.analyzer, self.stem, self.stopwords)

    def tokens(self, text: str) -> list[str]:
        """The tokens this encoder indexes for ``text``: read in the collection's language when it has one,
        else in the text's own."""
        return list(self.analysis.tokens(text, _reading(self.language, text)))

    def encode_documents(
        self, texts: Iterable[str], titles: Sequence[str] | None = None
    ) -> list[SparseVector]:
        fields = _fields(self.analysis, self.language, texts, titles if self.title_weight > 0 else None)
        return [self._weigh(text, title) for text, title in fields]

    def encode_queries(
        self, texts: Iterable[str], vocabulary: Container[int] | None = None
    ) -> list[SparseVector]:
        """1.0 per distinct token: repeated query words do not count twice, IDF does the weighting.

        A monolingual collection reads every query in its language. In a mixed one, a query the script
        cannot settle (``Analyzer.readings``) is read in Arabic and in Persian, and with the collection's
        ``vocabulary`` (token ids) keeps the reading that gives more known tokens (ties: the detected
        language), so Persian typed on an Arabic keyboard is not stemmed as Arabic against Persian text.
        """
        out = []
        for text in texts:
            if self.language is not None or vocabulary is None:
                readings: tuple[Language | None, ...] = (_reading(self.language, text),)
            else:
                readings = self.analysis.readings(text)
            best: set[int] = set()
            known = -1
            for lang in readings:
                ids = {token_id(t) for t in self.analysis.tokens(text, lang)}
                found = sum(i in vocabulary for i in ids) if vocabulary is not None else 0
                if found > known:
                    best, known = ids, found
            out.append(SparseVector(sorted(best), [1.0] * len(best)))
        return out

    def _weigh(self, text: Sequence[str], title: Sequence[str]) -> SparseVector:
        """BM25F term weights: per-field length-normalized tf, summed (title weighted), saturated once."""
        tf = Counter(map(token_id, text))
        norm = 1.0 - self.b + self.b * len(text) / self.avglen
        freq = {i: n / norm for i, n in tf.items()}
        if title:
            norm_title = (1.0 - self.b + self.b * len(title) / self.avglen_title) / self.title_weight
            for i, n in Counter(map(token_id, title)).items():
                freq[i] = freq.get(i, 0.0) + n / norm_title
        ids = sorted(freq)
        return SparseVector(ids, [freq[i] * (self.k1 + 1.0) / (freq[i] + self.k1) for i in ids])

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
            analyzer=data["analyzer"],
            stem=bool(data["stem"]),
            stopwords=bool(data["stopwords"]),
            title_weight=float(data["title_weight"]),
            avglen_title=float(data["avglen_title"]),
            n_docs=int(data["n_docs"]),
            language=data["language"],
        )


def _reading(language: Language | None, text: str) -> Language | None:
    """The language a text is read in: the collection's for Arabic-script text, else detected (None)."""
    if language is not None and detect_language(text) in ("ar", "fa"):
        return language
    return None


def _fields(
    analysis: Analyzer, language: Language | None, texts: Iterable[str], titles: Sequence[str] | None
) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(text tokens, title tokens) per document; a title is read in its text's language."""
    texts = list(texts)
    if titles is not None and len(titles) != len(texts):
        raise ValueError(f"{len(titles)} titles for {len(texts)} texts")
    out = []
    for i, text in enumerate(texts):
        lang = _reading(language, text) or (detect_language(text) if analysis.name != "plain" else None)
        title = titles[i] if titles is not None else ""
        out.append((analysis.tokens(text, lang), analysis.tokens(title, lang) if title else ()))
    return out
