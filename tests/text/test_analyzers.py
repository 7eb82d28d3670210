"""BM25 analyzers on known words: Rishe's hazm-style Persian lemmas, ISRI and Tashaphyne Arabic stems, the
plain baseline's folding, ZWNJ, and the script-aware reading of Persian typed on an Arabic keyboard."""

from __future__ import annotations

import builtins
import json
from pathlib import Path
from typing import Any

import pytest

from composer.errors import ConfigError
from composer.index import Bm25Encoder
from composer.index.bm25 import token_id
from composer.text.analyzers import ANALYZERS, Analyzer


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("کتاب‌ها را می‌خوانم", ("کتاب", "خواند#خوان")),  # plural suffix off, verb to past#present stem
        ("كتاب ها را مي خوانم", ("کتاب", "خواند#خوان")),  # Arabic keyboard, ZWNJ typed as spaces
        ("دانشگاه‌های بزرگ‌ترین شهرها", ("دانشگاه", "بزرگ", "شهر")),  # ezafe plural, superlative, plural
        ("رفتند و می‌روم", ("رفت#رو", "رفت#رو")),  # two tenses of one verb
    ],
)
def test_rishe_lemmatizes_persian_like_hazm(text: str, tokens: tuple[str, ...]) -> None:
    assert Analyzer("rishe").tokens(text, "fa") == tokens


@pytest.mark.parametrize(
    ("name", "text", "tokens"),
    [
        ("isri", "المكتبات والمدرسة يكتبون", ("كتب", "درس", "كتب")),  # roots
        ("isri", "مستشفيات بالقاهرة", ("شفي", "قهر")),
        ("tashaphyne", "المكتبات والمدرسة يكتبون", ("مكتب", "مدرسه", "كتب")),  # affixes only
        ("tashaphyne", "مستشفيات بالقاهرة", ("مستشف", "قاهره")),
        ("default", "المكتبات والمدرسة يكتبون", ("مكتب", "والمدرس", "يكتب")),  # Snowball
    ],
)
def test_arabic_stemmers_on_known_words(name: Any, text: str, tokens: tuple[str, ...]) -> None:
    assert Analyzer(name).tokens(text, "ar") == tokens


def test_stem_false_turns_every_stemmer_off() -> None:
    words = "المكتبات والمدرسة"
    unstemmed = Analyzer("default", stem=False).tokens(words, "ar")
    assert unstemmed == ("المكتبات", "والمدرسه")
    assert all(Analyzer(name, stem=False).tokens(words, "ar") == unstemmed
               for name in ANALYZERS if name != "plain")


def test_plain_is_the_issue_baseline() -> None:
    """NFKC, no diacritics, alef/yeh/kaf/teh-marbuta folded to Arabic letters, lower case, Snowball Arabic,
    stopwords kept: whatever the language."""
    plain = Analyzer("plain", stopwords=False)
    assert plain.tokens("أَحْمَدُ في مدرسة Hello WORLD") == ("احمد", "في", "مدرس", "hello", "world")
    assert plain.tokens("کتاب علی") == plain.tokens("كتاب علي") == ("كتاب", "عل")  # Snowball: علي -> عل
    assert plain.tokens("مدرسة", "fa") == plain.tokens("مدرسة", "ar"), "plain ignores the language"
    assert "في" not in Analyzer("plain").tokens("أحمد في مدرسة"), "with stopwords: the union of the lists"


def test_letter_forms_fold_to_the_same_token_ids() -> None:
    default = Analyzer()
    pairs = [("مكتبة الإسكندرية", "مكتبه الاسكندريه"), ("نهر النیل", "نهر النيل"), ("۱۳۱۶", "1316")]
    for a, b in pairs:
        assert [token_id(t) for t in default.tokens(a)] == [token_id(t) for t in default.tokens(b)]


def test_zwnj_cuts_persian_words_for_search() -> None:
    """PersianQA's questions write "موفق ترین" where the article has "موفق‌ترین": both give one token each."""
    default = Analyzer()
    assert default.tokens("موفق‌ترین تیم", "fa") == default.tokens("موفق ترین تیم", "fa")
    assert default.tokens("کتاب‌های", "fa") == ("کتاب",), "the plural suffix is a stopword of its own"


@pytest.mark.parametrize(
    ("text", "readings"),
    [
        ("كتابخانه ملی ايران", ("ar", "fa")),  # nothing settles it: Persian on an Arabic keyboard?
        ("ما هي عاصمة مصر", ("ar",)),  # teh marbuta
        ("مكتبة الإسكندرية", ("ar",)),
        ("پایتخت ایران کجاست", ("fa",)),  # peh
        ("می\u200cروم", ("fa",)),  # ZWNJ
        ("Where is Cairo?", ("en",)),
    ],
)
def test_only_text_the_script_cannot_settle_has_two_readings(text: str, readings: tuple[str, ...]) -> None:
    assert Analyzer().readings(text) == readings
    assert Analyzer("plain").readings(text) == (None,)


def test_a_persian_collection_reads_arabic_keyboard_queries_in_persian(persianqa_dir: Path) -> None:
    docs = [json.loads(line)["text"] for line in (persianqa_dir / "corpus.jsonl").open(encoding="utf-8")]
    for name in ("default", "rishe", "isri"):
        encoder, _ = Bm25Encoder.fit(docs, analyzer=name)
        assert encoder.language == "fa"
        typed, proper = encoder.encode_queries(["كتابخانه ملي ايران كجاست", "کتابخانه ملی ایران کجاست"])
        assert typed == proper and typed.indices, name


def test_collection_language_needs_a_clear_majority() -> None:
    ar, fa = "ذهب الولد إلى المدرسة.", "پسر به مدرسه رفت."
    default = Analyzer()
    assert default.collection_language([ar] * 9 + [fa]) == "ar"
    assert default.collection_language([ar] * 8 + [fa] * 2) is None, "80/20 is a mixed collection"
    assert default.collection_language(["Hello there", fa]) == "fa", "only Arabic-script texts count"
    assert default.collection_language(["Hello there"]) is None
    assert Analyzer("plain").collection_language([ar] * 10) is None


def test_unknown_analyzer_and_missing_package_name_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError) as info:
        Analyzer("hazm")  # type: ignore[arg-type]
    assert info.value.field == "retrieval.analyzer"

    from composer.text import analyzers

    real_import = builtins.__import__

    def no_tashaphyne(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("tashaphyne"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    analyzers._tashaphyne.cache_clear()
    monkeypatch.setattr(builtins, "__import__", no_tashaphyne)
    try:
        with pytest.raises(ConfigError, match=r"pip install 'composer-rag\[tashaphyne\]'") as info:
            Analyzer("tashaphyne").require()
        assert info.value.field == "retrieval.analyzer"
        Analyzer("tashaphyne", stem=False).require()  # no stemmer, nothing to import
    finally:
        analyzers._tashaphyne.cache_clear()
