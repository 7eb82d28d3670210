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
from typing import Any, Literal, get_args

from composer.errors import ConfigError
from composer.text.lang import Language, detect_language
from composer.text.normalize import ZWNJ, normalize
from composer.text.stopwords import STOPWORDS
from composer.text.tokenize import ANALYSIS_MEMO, TOKEN, snowball, tokenize

AnalyzerName = Literal["default", "isri", "tashaphyne", "rishe", "plain"]
ANALYZERS: tuple[str, ...] = get_args(AnalyzerName)

Stemmer = Callable[[Sequence[str]], list[str]]

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

    def collection_language(self, texts: Sequence[str]) -> Language | None:
        """The one language of a collection's Arabic-script documents, when at least ``DOMINANT_SHARE`` of
        them are detected in it (None: mixed, none, or ``plain``). A monolingual collection reads all its
        Arabic-script texts, queries included, in that language: per-text detection can only misroute
        there (measured on ARCD and PersianQA: reading queries in the vocabulary's best language instead
        costs up to 0.02 nDCG@10)."""
        if self.name == "plain":
            return None
        counts = Counter(lang for lang in map(detect_language, texts) if lang in ("ar", "fa"))
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
