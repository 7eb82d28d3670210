"""BM25 analyzers: how a text becomes the tokens a BM25 index holds, one small recipe each.

Every analyzer but ``plain`` reads a text in its own language (``detect_language``, or the language the
caller passes) and folds letters with ``normalize``; they differ in the stemmer each language gets:

- ``default``: Snowball for Arabic and English; Persian unstemmed (Snowball has no Persian).
- ``isri``: Arabic through NLTK's ISRI root-based stemmer (Taghva et al. 2005), otherwise ``default``.
- ``tashaphyne``: Arabic through Tashaphyne's light stemmer (affixes only, no root), otherwise ``default``.
  Tashaphyne is GPL-licensed, so it is an optional extra: ``pip install 'composer-rag[tashaphyne]'``.
- ``rishe``: Persian through Rishe's hazm-compatible normalizer, word tokenizer (which joins split verb
  parts such as ``می روم``) and lemmatizer (``کتاب‌ها`` → ``کتاب``, ``می‌روم`` → ``رفت#رو``), otherwise
  ``default``. hazm itself cannot be installed beside this project: hazm 0.10 pins numpy 1.24.3 and imports
  gensim and fasttext, hazm 0.11+ needs Python 3.12.
- ``plain``: the language-blind baseline a careful engineer writes by hand: NFKC, no diacritics or
  tatweel, alef/yeh/kaf/teh-marbuta forms folded to Arabic letters, lower case, Snowball Arabic for every
  token. No routing, so it is never wrong about the language, and never right either.

In Persian a zero-width non-joiner (ZWNJ) separates a word's morphemes (``موفق‌ترین``, ``کتاب‌ها``),
and users type it as a space as often as not: the language-aware analyzers cut words there, so both
spellings give the same tokens (``normalize`` itself drops ZWNJ, which is what answer matching wants).

``stem=False`` turns any stemmer or lemmatizer off; ``stopwords`` drops each language's function words
(``plain``, which knows no language, drops the union of the three lists).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, get_args

from composer.errors import ConfigError
from composer.text.lang import Language, detect_language
from composer.text.normalize import ZWNJ, normalize
from composer.text.stopwords import STOPWORDS
from composer.text.tokenize import ANALYSIS_MEMO, TOKEN, snowball, tokenize

if TYPE_CHECKING:
    import numpy as np

AnalyzerName = Literal["default", "isri", "tashaphyne", "rishe", "plain"]
ANALYZERS: tuple[str, ...] = get_args(AnalyzerName)

Stemmer = Callable[[Sequence[str]], list[str]]

BATCH = 4096
"""Texts analyzed together by ``Analyzer.encode_batch``: their words are held as Python strings at once."""

DOMINANT_SHARE = 0.9
"""Share of a collection's Arabic-script documents in one language that makes it monolingual."""
# Marks that settle Arabic against Persian whatever the keyboard: teh marbuta, hamza on alef, alef maksura,
# harakat, a word starting with the article; peh, tcheh, jeh, gaf and the zero-width non-joiner.
_DECISIVE = re.compile(r"[ةأإى\u064b-\u0652پچژگ\u200c]|(?:^|\s)ال")


@dataclass(frozen=True)
class Analyzer:
    """One BM25 analysis: ``name`` picks the recipe (see the module docstring)."""

    name: AnalyzerName = "default"
    stem: bool = True
    stopwords: bool = True

    def __post_init__(self) -> None:
        if self.name not in ANALYZERS:
            raise ConfigError(f"unknown analyzer {self.name!r}; expected one of {list(ANALYZERS)}",
                              field="retrieval.analyzer")

    def tokens(self, text: str, lang: Language | None = None) -> tuple[str, ...]:
        """The tokens of ``text`` read as ``lang`` (None: detected per text; ``plain`` ignores it)."""
        return _analyze(self, text, None if self.name == "plain" else lang)

    def encode_batch(
        self, texts: Sequence[str], langs: Sequence[Language | None], encode: Callable[[str], int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The tokens of many texts as ids (``encode(token)`` >= 0), what ``tokens`` gives text by text.

        Returns the ids of all texts' tokens one after another (int64) and the offsets (n + 1): text
        ``i``'s are ``ids[offsets[i]:offsets[i + 1]]``. Per-token work happens in C (regex, dict
        lookups, numpy); stemming, stopwords and ``encode`` run once per distinct word, which is what
        makes indexing a large corpus fast (a corpus repeats its vocabulary).
        """
        import numpy as np

        if len(texts) != len(langs):
            raise ValueError(f"{len(langs)} languages for {len(texts)} texts")
        memo: dict[tuple[Any, ...], dict[str, int]] = {}  # recipe -> word -> id (-1: dropped)
        ids: list[np.ndarray] = []
        lengths: list[np.ndarray] = []
        for lo in range(0, len(texts), BATCH):
            batch = [(t, None if self.name == "plain" else (lang or detect_language(t)))
                     for t, lang in zip(texts[lo:lo + BATCH], langs[lo:lo + BATCH], strict=True)]
            recipes = [_recipe(self, lang) for _, lang in batch]
            words = [r.words(t) for (t, _), r in zip(batch, recipes, strict=True)]
            counts = np.fromiter(map(len, words), np.int64, len(words))
            out = np.empty(int(counts.sum()), np.int64)
            starts = np.concatenate(([0], np.cumsum(counts)))
            for recipe in {r.key: r for r in recipes}.values():
                table = memo.setdefault(recipe.key, {})
                members = [i for i, r in enumerate(recipes) if r.key == recipe.key]
                flat = list(chain.from_iterable(words[i] for i in members))
                new = list(dict.fromkeys(flat).keys() - table.keys())
                encoded = [-1 if f is None else encode(f) for f in recipe.finals(new)]
                table.update(zip(new, encoded, strict=True))
                found = np.fromiter(map(table.__getitem__, flat), np.int64, len(flat))
                if len(members) == len(batch):
                    out = found
                else:
                    at = np.concatenate([np.arange(starts[i], starts[i + 1]) for i in members])
                    out[at] = found
            doc = np.repeat(np.arange(len(batch)), counts)
            keep = out >= 0
            ids.append(out[keep])
            lengths.append(np.bincount(doc[keep], minlength=len(batch)))
        flat_ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
        offsets = np.concatenate(([0], np.cumsum(np.concatenate(lengths)))) if lengths else np.zeros(1)
        return flat_ids, offsets.astype(np.int64)

    def readings(self, text: str) -> tuple[Language | None, ...]:
        """The languages a query may be read in, the detected one first.

        Script-aware: Persian typed on an Arabic keyboard (Arabic yeh and kaf, no پ چ ژ گ) looks Arabic
        letter by letter, so an Arabic-script text with neither Arabic-only marks (ة أ إ ى, harakat, an
        ال- word) nor Persian-only ones (پ چ ژ گ, ZWNJ) may be either language; any other text has one
        reading. The BM25 encoder of a mixed collection keeps the reading whose tokens it knows best."""
        if self.name == "plain":
            return (None,)
        lang = detect_language(text)
        if lang in ("ar", "fa") and not _DECISIVE.search(text):
            return (lang, "fa" if lang == "ar" else "ar")
        return (lang,)

    def collection_language(
        self, texts: Sequence[str], detected: Sequence[Language] | None = None
    ) -> Language | None:
        """The one language of a collection's Arabic-script documents, when at least ``DOMINANT_SHARE`` of
        them are detected in it (None: mixed, none, or ``plain``). A monolingual collection reads all its
        Arabic-script texts, queries included, in that language: per-text detection can only misroute
        there (measured on ARCD and PersianQA: reading queries in the vocabulary's best language instead
        costs up to 0.02 nDCG@10). ``detected``: the texts' ``detect_language``, when the caller has them."""
        if self.name == "plain":
            return None
        langs = detected if detected is not None else map(detect_language, texts)
        counts = Counter(lang for lang in langs if lang in ("ar", "fa"))
        if not counts:
            return None
        lang, n = counts.most_common(1)[0]
        return lang if n >= DOMINANT_SHARE * sum(counts.values()) else None

    def require(self) -> None:
        """Import this analyzer's stemmer now, so a missing optional package fails before any index is
        built, naming the setting."""
        if self.stem and self.name in ("isri", "tashaphyne", "rishe"):
            _STEMMERS[self.name]()


@lru_cache(maxsize=ANALYSIS_MEMO)
def _analyze(analyzer: Analyzer, text: str, lang: Language | None) -> tuple[str, ...]:
    """Memoized: a study re-indexes and re-queries the same texts under the same analyzer every trial."""
    if analyzer.name == "plain":
        return _plain(text, analyzer.stem, analyzer.stopwords)
    if lang is None:
        lang = detect_language(text)
    if lang == "fa":
        if analyzer.stem and analyzer.name == "rishe":
            return _rishe_tokens(text, analyzer.stopwords)
        # ZWNJ cuts words for search: "موفق‌ترین" and "موفق ترین" give the same tokens.
        return tuple(tokenize(text.replace(ZWNJ, " "), "fa", stopwords=analyzer.stopwords))
    if lang == "ar" and analyzer.stem and analyzer.name in ("isri", "tashaphyne"):
        words = tokenize(text, "ar", stopwords=analyzer.stopwords)
        return tuple(_STEMMERS[analyzer.name]()(words))
    return tuple(tokenize(text, lang, stopwords=analyzer.stopwords, stem=analyzer.stem))


class _Recipe(NamedTuple):
    """How ``_analyze`` reads one language under one analyzer, split for batches: ``words`` are a text's
    raw words in order, ``finals`` the token each distinct word becomes (None: a dropped stopword)."""

    key: tuple[Any, ...]
    words: Callable[[str], list[str]]
    finals: Callable[[list[str]], list[str | None]]


@lru_cache(maxsize=64)
def _recipe(analyzer: Analyzer, lang: Language | None) -> _Recipe:
    """``_analyze(analyzer, text, lang)`` as a recipe (``lang`` resolved; None only for ``plain``)."""
    key = (analyzer, lang)
    if analyzer.name == "plain":
        stop = _plain_stopwords() if analyzer.stopwords else frozenset()
        return _Recipe(key, lambda t: TOKEN.findall(_fold_plain(t)),
                       _finals(stop, snowball("ar").stemWords if analyzer.stem else None))
    if lang == "fa" and analyzer.stem and analyzer.name == "rishe":
        return _Recipe(key, lambda t: list(_rishe_tokens(t, analyzer.stopwords)), lambda ws: list(ws))
    stop = STOPWORDS.get(str(lang), frozenset()) if analyzer.stopwords else frozenset()
    if lang == "fa":
        return _Recipe(key, lambda t: TOKEN.findall(normalize(t.replace(ZWNJ, " "), "fa")),
                       _finals(stop, None))
    stem: Stemmer | None = None
    if lang == "ar" and analyzer.stem and analyzer.name in ("isri", "tashaphyne"):
        stem = _STEMMERS[analyzer.name]()
    elif analyzer.stem and lang in ("ar", "en"):
        stem = snowball(str(lang)).stemWords
    return _Recipe(key, lambda t: TOKEN.findall(normalize(t, lang)), _finals(stop, stem))


def _finals(stop: frozenset[str], stem: Stemmer | None) -> Callable[[list[str]], list[str | None]]:
    """Distinct words to tokens: stopwords (by surface form) dropped, the rest stemmed when ``stem``."""

    def finals(words: list[str]) -> list[str | None]:
        kept = [w for w in words if w not in stop]
        stems = iter(stem(kept) if stem is not None else kept)
        return [None if w in stop else next(stems) for w in words]

    return finals


# -- plain: the language-blind baseline ---------------------------------------------------------------------

_DIACRITICS_AND_TATWEEL = re.compile(r"[\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06dc\u06df-\u06ed\u0640]")
_PLAIN_FOLD = str.maketrans(
    {"أ": "ا", "إ": "ا", "آ": "ا", "ٱ": "ا", "ى": "ي", "ی": "ي", "ک": "ك", "ة": "ه", "ۀ": "ه"}
)


@lru_cache(maxsize=1)
def _plain_stopwords() -> frozenset[str]:
    return frozenset(_fold_plain(w) for words in STOPWORDS.values() for w in words)


def _fold_plain(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    return _DIACRITICS_AND_TATWEEL.sub("", text).translate(_PLAIN_FOLD).lower()


def _plain(text: str, stem: bool, stopwords: bool) -> tuple[str, ...]:
    words = TOKEN.findall(_fold_plain(text))
    if stopwords:
        stop = _plain_stopwords()
        words = [w for w in words if w not in stop]
    return tuple(snowball("ar").stemWords(words) if stem else words)


# -- optional stemmers, imported on first use ---------------------------------------------------------------


def _missing(name: str, package: str, extra: str | None = None) -> ConfigError:
    install = f"pip install 'composer-rag[{extra}]'" if extra else f"pip install {package}"
    return ConfigError(f"analyzer {name!r} needs the {package} package: {install}",
                       field="retrieval.analyzer")


@lru_cache(maxsize=1)
def _isri() -> Stemmer:
    try:
        from nltk.stem.isri import ISRIStemmer  # rules only: no NLTK data download
    except ImportError:
        raise _missing("isri", "nltk") from None
    stem = lru_cache(maxsize=1 << 17)(ISRIStemmer().stem)
    return lambda words: [stem(w) for w in words]


@lru_cache(maxsize=1)
def _tashaphyne() -> Stemmer:
    try:
        from tashaphyne.stemming import ArabicLightStemmer
    except ImportError:
        raise _missing("tashaphyne", "tashaphyne", "tashaphyne") from None
    # light_stem depends on its argument only (checked over ARCD's 12,844 words in two orders).
    stem = lru_cache(maxsize=1 << 17)(ArabicLightStemmer().light_stem)
    return lambda words: [stem(w) for w in words]


@lru_cache(maxsize=1)
def _rishe() -> tuple[Any, Any, Any]:
    try:
        import rishe
    except ImportError:
        raise _missing("rishe", "rishe") from None
    return rishe.Normalizer(), rishe.WordTokenizer(), rishe.Lemmatizer()


_STEMMERS: dict[str, Callable[[], Any]] = {"isri": _isri, "tashaphyne": _tashaphyne, "rishe": _rishe}


def _rishe_tokens(text: str, stopwords: bool) -> tuple[str, ...]:
    """hazm's recipe through Rishe: normalize, tokenize, lemmatize; each lemma is one token (a verb's
    ``past#present`` too), folded like any Persian token. Stopwords are dropped by their surface form."""
    normalizer, words, lemmatizer = _rishe()
    stop = STOPWORDS["fa"] if stopwords else frozenset()
    out: list[str] = []
    for word in words.tokenize(normalizer.normalize(text)):
        surface = normalize(word, "fa")
        if not TOKEN.search(surface) or surface in stop:
            continue
        out.append(normalize(lemmatizer.lemmatize(word), "fa"))
    return tuple(out)
