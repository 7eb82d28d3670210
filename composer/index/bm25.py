"""BM25 as sparse vectors over our own ar/fa/en tokens; Qdrant supplies the IDF half (``Modifier.Idf``).

Documents carry the saturated, length-normalized term frequency ``tf·(k1+1) / (tf + k1·(1−b+b·len/avglen))``
(with a title field, BM25F's weighted sum of the fields' normalized frequencies in place of ``tf``),
queries weight each distinct token 1.0, and the IDF modifier multiplies in ``idf(t)`` from the collection's
own statistics at query time, so the dot product is classic BM25. Qdrant's built-in ``Bm25`` cannot be used:
it knows neither our Arabic/Persian letter folding nor Persian at all.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, overload

from composer.index import parallel
from composer.text import Language, detect_language
from composer.text.analyzers import Analyzer, AnalyzerName

if TYPE_CHECKING:
    import numpy as np

# Token ids must mean the same thing in every index a process ever reopens: bump on any change to
# tokenization, hashing or weighting so stale indexes are refused instead of silently mis-scored.
SCHEME = "composer-bm25/v2: composer.text.analyzers + title field (BM25F) + yeh/kaf fold + crc32"

# Persian and Arabic yeh/kaf are one letter each: a query whose language detection differs from the
# document's (short, mixed or Arabic-keyboard Persian) must still hash to the same ids.
_SCRIPT_NEUTRAL = str.maketrans({"ی": "ي", "ک": "ك"})


Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``: how far work has got, the one callback type of every stage. Defined
here, the lowest module that reports any: "analyze" (BM25's analysis: each text is read twice, language
and tokens); "encode" and "index" (``composer.pipeline.indexing``); "query" and "answer"
(``composer.pipeline.Pipeline``); "retrieved", "answered", "judged" (a trial's live progress,
``composer.evaluation.scoring``). The CLI draws one bar per stage."""


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
        progress: Progress | None = None,
    ) -> tuple[Bm25Encoder, SparseRows]:
        """Learn the fields' average lengths from the corpus and encode it in the same pass.

        The corpus's term counts are kept for the last few corpora (``_term_counts``): encoders that
        differ only in ``k1``, ``b`` or ``title_weight`` recompute the weights, not the analysis, which
        ``progress("analyze", texts done, texts)`` follows."""
        texts = list(texts)
        counts = _term_counts(Analyzer(analyzer, stem, stopwords), texts,
                              titles if title_weight > 0 else None, progress)
        n = len(texts)
        titled = counts.title.lengths[counts.title.lengths > 0] if counts.title is not None else None
        enc = cls(
            avglen=max(int(counts.text.lengths.sum()) / n, 1.0) if n else 1.0,
            k1=k1,
            b=b,
            analyzer=analyzer,
            stem=stem,
            stopwords=stopwords,
            title_weight=title_weight,
            avglen_title=(max(int(titled.sum()) / len(titled), 1.0)
                          if titled is not None and len(titled) else 1.0),
            n_docs=n,
            language=counts.language,
        )
        return enc, enc._weigh(counts)

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
        texts = list(texts)
        titles = titles if self.title_weight > 0 else None
        return list(self._weigh(_count(self.analysis, self.language, texts, titles)))

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

    def _weigh(self, counts: _Counts) -> SparseRows:
        """BM25F term weights: per-field length-normalized tf, summed (title weighted), saturated once.

        Vectorized over the corpus, in the same float64 operations, in the same order, as one document
        at a time: the weights are bit-for-bit those of the per-document formula."""
        import numpy as np

        text = counts.text
        norm = 1.0 - self.b + self.b * text.lengths.astype(np.float64) / self.avglen
        freq = text.counts / np.repeat(norm, np.diff(text.indptr))
        rows, terms = text.rows(), text.terms
        if counts.title is not None and len(counts.title.terms):
            title = counts.title
            norm_title = (1.0 - self.b + self.b * title.lengths.astype(np.float64) / self.avglen_title
                          ) / self.title_weight
            rows = np.concatenate([rows, title.rows()])
            terms = np.concatenate([terms, title.terms])
            freq = np.concatenate([freq, title.counts / np.repeat(norm_title, np.diff(title.indptr))])
            order = np.lexsort((terms, rows))
            rows, terms, freq = rows[order], terms[order], freq[order]
            first = np.ones(len(rows), bool)
            first[1:] = (rows[1:] != rows[:-1]) | (terms[1:] != terms[:-1])
            starts = np.flatnonzero(first)
            freq = np.add.reduceat(freq, starts) if len(starts) else freq  # a term in both fields: 2 values
            rows, terms = rows[starts], terms[starts]
        indptr = np.searchsorted(rows, np.arange(len(text.lengths) + 1))
        return SparseRows(indptr, terms, freq * (self.k1 + 1.0) / (freq + self.k1))

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


class SparseRows(Sequence[SparseVector]):
    """Many sparse vectors as three arrays (CSR): row ``i`` has token ids ``indices[indptr[i]:indptr[i+1]]``
    (ascending) and their ``values``. A corpus's vectors as Python lists would take ~10x the memory."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray) -> None:
        self.indptr, self.indices, self.values = indptr, indices, values

    def __len__(self) -> int:
        return len(self.indptr) - 1

    @overload
    def __getitem__(self, i: int) -> SparseVector: ...
    @overload
    def __getitem__(self, i: slice) -> SparseRows: ...
    def __getitem__(self, i: int | slice) -> SparseVector | SparseRows:
        if isinstance(i, slice):
            lo, hi, step = i.indices(len(self))
            if step != 1:
                raise ValueError("SparseRows slices must be contiguous")
            a, z = self.indptr[lo], self.indptr[max(hi, lo)]
            return SparseRows(self.indptr[lo:max(hi, lo) + 1] - a, self.indices[a:z], self.values[a:z])
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        a, z = self.indptr[i], self.indptr[i + 1]
        return SparseVector(self.indices[a:z].tolist(), self.values[a:z].tolist())


@dataclass(frozen=True)
class _Field:
    """One field's term counts over a corpus (CSR over token ids, ascending per row) and token lengths.
    Ids are uint32 (crc32) and counts int32: half of int64/float64's memory, and a count turns into the
    same float64 in the weighting."""

    indptr: np.ndarray
    terms: np.ndarray
    counts: np.ndarray
    lengths: np.ndarray

    def rows(self) -> np.ndarray:
        import numpy as np

        return np.repeat(np.arange(len(self.lengths)), np.diff(self.indptr))


@dataclass(frozen=True)
class _Counts:
    """What BM25 weights are computed from: the collection's language and each field's term counts."""

    language: Language | None
    langs: list[Language | None]  # the language each text (and its title) is read in
    text: _Field
    title: _Field | None


COUNT_BLOCK = 16_384
"""Texts whose token keys ``_count_field`` sorts at once."""

TERM_COUNTS_KEPT = 2
"""Corpora whose term counts ``fit`` keeps: a study's index keys over one chunking that differ only in
k1, b or title weight analyze the chunks once (200,000 paragraphs: ~100 MB each)."""
_TERM_COUNTS: list[tuple[Analyzer, list[str], Sequence[str] | None, _Counts]] = []


def _term_counts(
    analysis: Analyzer, texts: list[str], titles: Sequence[str] | None, progress: Progress | None = None
) -> _Counts:
    """``_count`` memoized over the last ``TERM_COUNTS_KEPT`` corpora (compared by value: the same chunk
    objects make that an identity check per text). A known corpus given titles anew counts only those."""
    for i, (known, known_texts, known_titles, counts) in enumerate(_TERM_COUNTS):
        if known == analysis and known_texts == texts:
            if titles is not None and (known_titles is None or list(known_titles) != list(titles)):
                counts = _Counts(counts.language, counts.langs, counts.text,
                                 _count_titles(analysis, counts, titles))
                known_titles = list(titles)  # a copy: the caller's list may change
            _TERM_COUNTS[i] = (known, known_texts, known_titles, counts)
            _TERM_COUNTS.insert(0, _TERM_COUNTS.pop(i))
            return counts if titles is not None else _Counts(counts.language, counts.langs, counts.text, None)
    # Detected once: past detect_language's memo (65,536 texts) a second pass would cost as much again.
    counted = _ShardProgress(progress, "analyze", 2 * len(texts) if analysis.name != "plain" else len(texts))
    detected = None if analysis.name == "plain" else _detect_all(texts, counted)
    counts = _count(analysis, analysis.collection_language(texts, detected), texts, titles, detected,
                    counted)
    _TERM_COUNTS.insert(0, (analysis, texts, None if titles is None else list(titles), counts))
    del _TERM_COUNTS[TERM_COUNTS_KEPT:]
    return counts


def _count(
    analysis: Analyzer,
    language: Language | None,
    texts: list[str],
    titles: Sequence[str] | None,
    detected: Sequence[Language] | None = None,
    progress: _ShardProgress | None = None,
) -> _Counts:
    """Term counts of the texts (and titles, each read in its text's language); ``detected``: the texts'
    ``detect_language`` when known."""
    if analysis.name == "plain":
        langs: list[Language | None] = [None] * len(texts)
    else:
        found = detected if detected is not None else list(map(detect_language, texts))
        # _reading's rule: Arabic-script text in the collection's language, the rest as detected.
        langs = [language if language is not None and d in ("ar", "fa") else d for d in found]
    counts = _Counts(language, langs, _field(analysis, texts, langs, progress), None)
    if titles is None:
        return counts
    return _Counts(language, langs, counts.text, _count_titles(analysis, counts, titles))


def _count_titles(analysis: Analyzer, counts: _Counts, titles: Sequence[str]) -> _Field:
    if len(titles) != len(counts.langs):
        raise ValueError(f"{len(titles)} titles for {len(counts.langs)} texts")
    return _field(analysis, [t or "" for t in titles], counts.langs)


class _ShardProgress:
    """``progress(stage, done, total)`` advanced by shards of ``composer.index.parallel`` as they finish."""

    def __init__(self, progress: Progress | None, stage: str, total: int) -> None:
        self.progress, self.stage, self.total, self.done = progress, stage, total, 0

    def shards(self, parts: list[slice]) -> Callable[[int], None] | None:
        """The ``done`` callback for a ``map_shards`` over ``parts``."""
        if self.progress is None:
            return None
        progress = self.progress

        def done(i: int) -> None:
            self.done += parts[i].stop - parts[i].start
            progress(self.stage, self.done, self.total)

        return done


def _detect_all(texts: list[str], progress: _ShardProgress | None = None) -> list[Language]:
    """Every text's ``detect_language``, in worker processes for a large corpus (``index.parallel``)."""
    parts = parallel.shards(len(texts))
    found = parallel.map_shards(_detect, [(texts[part],) for part in parts],
                                progress.shards(parts) if progress is not None else None)
    return [lang for shard in found for lang in shard]


def _detect(texts: list[str]) -> list[Language]:
    return list(map(detect_language, texts))


def _field(
    analysis: Analyzer, texts: list[str], langs: list[Language | None], progress: _ShardProgress | None = None
) -> _Field:
    """Each text's distinct token ids and their counts, in worker processes for a large corpus: texts are
    counted independently, so the shards' rows joined are the corpus's rows."""
    import numpy as np

    parts = parallel.shards(len(texts))
    calls = [(analysis, texts[part], langs[part]) for part in parts]
    fields = parallel.map_shards(_count_field, calls,
                                 progress.shards(parts) if progress is not None else None)
    if len(fields) == 1:
        return fields[0]
    starts = np.cumsum([0] + [len(f.terms) for f in fields])
    return _Field(np.concatenate([f.indptr[:-1] + s for f, s in zip(fields, starts, strict=False)]
                                 + [starts[-1:]]),
                  np.concatenate([f.terms for f in fields]), np.concatenate([f.counts for f in fields]),
                  np.concatenate([f.lengths for f in fields]))


def _count_field(analysis: Analyzer, texts: list[str], langs: list[Language | None]) -> _Field:
    """Count each text's distinct token ids (crc32 after the script-neutral fold: collisions merge)."""
    import numpy as np

    ids, offsets = analysis.encode_batch(texts, langs, token_id)
    ids = ids.astype(np.uint32)
    lengths = np.diff(offsets).astype(np.int32)
    terms, counts, distinct = [], [], []
    for lo in range(0, len(texts), COUNT_BLOCK):  # a block's keys at a time: 125k texts 420 -> 250 MB
        hi = min(lo + COUNT_BLOCK, len(texts))
        rows = np.repeat(np.arange(hi - lo, dtype=np.int64), lengths[lo:hi])
        key = rows << 32 | ids[offsets[lo]:offsets[hi]]
        uniq, n = np.unique(key, return_counts=True)
        terms.append((uniq & 0xFFFFFFFF).astype(np.uint32))
        counts.append(n.astype(np.int32))
        distinct.append(np.bincount(uniq >> 32, minlength=hi - lo))
    indptr = np.concatenate([[0], np.cumsum(np.concatenate(distinct))]) if distinct else np.zeros(1, np.int64)
    return _Field(indptr.astype(np.int64), np.concatenate(terms) if terms else np.zeros(0, np.uint32),
                  np.concatenate(counts) if counts else np.zeros(0, np.int32), lengths)
