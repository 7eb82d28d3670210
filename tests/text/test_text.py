"""Arabic, Persian and English text: normalization, language detection, tokens and sentences."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from composer.text import (
    content_tokens,
    detect_language,
    normalize,
    sentence_spans,
    split_sentences,
    tokenize,
)
from composer.text.stopwords import STOPWORDS


def _field(path: Path, name: str) -> list[str]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line)[name] for line in f if line.strip()]


# -- normalize -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "lang", "expected"),
    [
        ("ﺍﻟﻌﺮﺑﻴﺔ ﻻ", "ar", "العربيه لا"),  # NFKC: presentation forms and the lam-alef ligature
        ("ＡＢＣ Hello", "en", "abc hello"),  # NFKC full-width, then case folded
        ("مُحَمَّدٌ وَهٰذا", "ar", "محمد وهذا"),  # harakat, tanwin, shadda, superscript alef
        ("العـــربية", "ar", "العربيه"),  # tatweel
        ("أحمد إبراهيم آدم ٱلله", "ar", "احمد ابراهيم ادم الله"),  # alef forms
        ("مدرسة", "ar", "مدرسه"),  # teh marbuta
        ("مستشفى", "ar", "مستشفي"),  # alef maksura -> yeh
        ("مستشفى", "fa", "مستشفی"),  # ... Persian yeh in Persian
        ("كتاب علي", "fa", "کتاب علی"),  # Arabic kaf and yeh -> Persian ones
        ("تقسیمات ک", "ar", "تقسيمات ك"),  # Persian-keyboard letters in Arabic text
        ("خانۀ خانهٔ", "fa", "خانه خانه"),  # heh with yeh above, composed or typed as heh + hamza
        ("می\u200cروم", "fa", "میروم"),  # ZWNJ joins Persian morphemes
        ("a\u200cb", "en", "a b"),  # ... and separates elsewhere
        ("١٢٣ ۴۵۶ 789", "ar", "123 456 789"),  # Arabic-Indic and Persian digits
        ("  a \t b\n\u00a0c ", "en", "a b c"),  # whitespace collapsed and trimmed
        ("\u200fمصر\u200e\u00ad\u061c", "ar", "مصر"),  # bidi marks, soft hyphen, Arabic letter mark
        ("", "ar", ""),
    ],
)
def test_normalize(raw: str, lang: str, expected: str) -> None:
    assert normalize(raw, lang) == expected


def test_normalize_detects_the_language_when_not_given() -> None:
    assert normalize("پایتخت ايران كجاست؟") == "پایتخت ایران کجاست؟"
    assert normalize("كتاب يوسف") == "كتاب يوسف"
    assert normalize("می\u200cروم") == normalize("میروم")


def test_normalize_is_idempotent_on_the_datasets(arcd_dir: Path, persianqa_dir: Path) -> None:
    for path, lang in ((arcd_dir / "corpus.jsonl", "ar"), (persianqa_dir / "corpus.jsonl", "fa")):
        for text in _field(path, "text"):
            once = normalize(text, lang)
            assert normalize(once, lang) == once
            assert "  " not in once and "\u0640" not in once


# -- detect_language -----------------------------------------------------------------------------------


def test_detects_arabic_on_arcd(arcd_dir: Path) -> None:
    questions = _field(arcd_dir / "questions.jsonl", "question")
    assert len(questions) == 1395
    assert sum(detect_language(q) == "ar" for q in questions) / len(questions) >= 0.95


def test_detects_persian_on_persianqa(persianqa_dir: Path) -> None:
    for name in ("questions.jsonl", "questions_unanswerable.jsonl"):
        questions = _field(persianqa_dir / name, "question")
        assert sum(detect_language(q) == "fa" for q in questions) / len(questions) >= 0.95


def test_detection_survives_the_other_keyboard(arcd_dir: Path, persianqa_dir: Path) -> None:
    """Persian typed with Arabic yeh/kaf is still Persian, and Arabic typed with Persian ones still Arabic."""
    for text in _field(persianqa_dir / "corpus.jsonl", "text"):
        assert detect_language(text.replace("ی", "ي").replace("ک", "ك")) == "fa"
    for text in _field(arcd_dir / "corpus.jsonl", "text"):
        assert detect_language(text.replace("ي", "ی").replace("ك", "ک").replace("ى", "ی")) == "ar"


@pytest.mark.parametrize(
    ("text", "lang"),
    [
        ("What is the capital of Egypt?", "en"),
        ("اين ولد نجيب محفوظ؟", "ar"),
        ("پایتخت ايران كجاست؟", "fa"),
        ("Who wrote Kalila wa Dimna (كليلة ودمنة)?", "en"),
        ("ما هذا؟", "ar"),
        ("این چیست؟", "fa"),
        ("پایتخت ایران کجاست؟", "fa"),
        ("12345", "other"),
        ("Привет", "other"),
        ("", "other"),
    ],
)
def test_detect_language(text: str, lang: str) -> None:
    assert detect_language(text) == lang


# -- tokenize ------------------------------------------------------------------------------------------


def test_arabic_tokens_stopwords_and_stemming() -> None:
    text = "ذهب الطلاب إلى المدارس في المدينة"
    assert tokenize(text, "ar") == ["ذهب", "الطلاب", "الي", "المدارس", "في", "المدينه"]
    assert tokenize(text, "ar", stopwords=True) == ["ذهب", "الطلاب", "المدارس", "المدينه"]
    assert tokenize(text, "ar", stopwords=True, stem=True) == ["ذهب", "طلاب", "مدارس", "مدينه"]
    assert tokenize(text) == tokenize(text, "ar")


def test_punctuation_separates_tokens() -> None:
    assert tokenize("مصر، والقاهرة؛ ما؟ عام ١٩٥٨.", "ar") == ["مصر", "والقاهره", "ما", "عام", "1958"]
    assert tokenize("don't stop-words", "en") == ["don", "t", "stop", "words"]


def test_persian_tokens_keep_zwnj_words_whole_and_are_never_stemmed() -> None:
    text = "کتاب‌ها در کتابخانه‌ها می‌شود خوانده"
    assert tokenize(text, "fa") == ["کتابها", "در", "کتابخانهها", "میشود", "خوانده"]
    assert tokenize(text, "fa", stopwords=True, stem=True) == ["کتابها", "کتابخانهها", "خوانده"]


def test_english_tokens() -> None:
    assert tokenize("The runners were running quickly", stopwords=True, stem=True) == [
        "runner",
        "run",
        "quick",
    ]
    assert content_tokens("What is the capital of Egypt?") == ["capital", "egypt"]


def test_stopwords_are_stored_normalized() -> None:
    for lang, words in STOPWORDS.items():
        assert words, lang
        for word in words:
            assert tokenize(word, lang) == [word]


# -- sentences -----------------------------------------------------------------------------------------


def test_arabic_sentences_without_final_stop() -> None:
    text = "ما هي عاصمة مصر؟ القاهرة هي العاصمة، وهي كبيرة؛ جدا. ولا نهاية"
    assert split_sentences(text) == [
        "ما هي عاصمة مصر؟",
        "القاهرة هي العاصمة، وهي كبيرة؛",
        "جدا.",
        "ولا نهاية",
    ]
    assert [text[s:e] for s, e in sentence_spans(text)] == split_sentences(text)


def test_sentence_boundaries() -> None:
    assert split_sentences("این کتاب است۔ آن قلم است") == ["این کتاب است۔", "آن قلم است"]
    assert split_sentences("«قال: نعم.» ثم ذهب") == ["«قال: نعم.»", "ثم ذهب"]
    assert split_sentences("Pi is 3.14 exactly!! Yes") == ["Pi is 3.14 exactly!!", "Yes"]
    assert split_sentences("  first line\n\nsecond line  ") == ["first line", "second line"]
    assert sentence_spans("  first line\n\nsecond") == [(2, 12), (14, 20)]
    assert split_sentences("") == []
    assert split_sentences(" \n ") == []
