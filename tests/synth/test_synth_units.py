"""What `composer synth` does without an LLM: spans, passages, pairs, mix, replies, filters, settings."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from composer.data.types import Corpus, Document
from composer.llm.parse import ParseError
from composer.synth.config import KINDS, SynthConfig, allocate, parse_mix
from composer.synth.filters import DuplicateIndex, length_problem, persian_letters, wrong_script
from composer.synth.passages import Passage, corpus_passages, stratified, windows
from composer.synth.prompts import GENERATE, avoid_block, passage_block
from composer.synth.related import related_pairs
from composer.synth.replies import parse_check, parse_closed_book, parse_generated
from composer.synth.spans import find_span

ARABIC = "جمال أحمد حمزة خاشقجي (13 أكتوبر 1958، المدينة المنورة)، صحفي وإعلامي سعودي، رأس عدّة مناصب."


@pytest.mark.parametrize(
    ("passage", "answer", "lang", "expected"),
    [
        (ARABIC, "المدينه المنوره", "ar", "المدينة المنورة"),  # teh marbuta folded
        (ARABIC, "احمد", "ar", "أحمد"),  # hamza on alef folded
        (ARABIC, "عدة مناصب.", "ar", "عدّة مناصب"),  # shadda kept in the span, final stop ignored
        (ARABIC, "١٣ اكتوبر", "ar", "13 أكتوبر"),  # Arabic-Indic digits
        (ARABIC, "خاشقجى", "ar", "خاشقجي"),  # alef maqsura / yeh
        ("کتاب‌های او در ۱۳۵۷ منتشر شد", "کتابهای او", "fa", "کتاب‌های او"),  # ZWNJ dropped in Persian
        ("مي‌گويند که او آمد", "میگویند", "fa", "مي‌گويند"),  # Arabic yeh typed in Persian
        ("جاء الكتاب والكتابة", "الكتابة", "ar", "الكتابة"),  # a whole word wins over a prefix match
        ("Founded in  1908 by the\nEgyptian state", "1908 by the egyptian", "en", "1908 by the\nEgyptian"),
    ],
)
def test_answer_spans_are_found_folded_and_mapped_back_exactly(
    passage: str, answer: str, lang: str, expected: str
) -> None:
    span = find_span(passage, answer, lang)
    assert span is not None and passage[span[0] : span[1]] == expected


def test_a_number_does_not_match_inside_a_longer_one_and_absent_answers_are_none() -> None:
    assert find_span(ARABIC, "195", "ar") is None
    assert find_span("سنة 1400 ثم 14", "14", "ar") == (12, 14)
    assert find_span(ARABIC, "القاهرة", "ar") is None
    assert find_span(ARABIC, " .، ", "ar") is None


def test_windows_hold_whole_sentences_within_bounds() -> None:
    text = " ".join(f"Sentence number {i} says something about topic {i}." for i in range(40))
    doc = Document("d", text)
    spans = windows(doc, 100, 300)
    assert len(spans) > 5
    assert all(100 <= e - s <= 300 for s, e in spans)
    assert all(text[s:e].startswith("Sentence") and text[s:e].endswith(".") for s, e in spans)
    assert windows(Document("short", "Too short."), 100, 300) == []
    long_sentence = Document("l", "word " * 200)  # one sentence longer than the bound: cut at spaces
    assert all(
        e - s <= 300 and not long_sentence.text[s:e].startswith(" ")
        for s, e in windows(long_sentence, 50, 300)
    )


def test_sampling_covers_every_document_before_repeating_and_follows_the_seed() -> None:
    corpus = Corpus(
        [Document(f"d{i}", f"Document {i} talks about subject {i}. " * (1 + i % 3)) for i in range(9)]
    )
    by_doc = corpus_passages(corpus, 20, 60)
    stream = stratified(by_doc, seed=0)
    first = [next(stream).doc_id for _ in range(9)]
    assert sorted(first) == sorted(by_doc)  # every document once before any repeats
    again = stratified(by_doc, seed=0)
    assert [next(again).doc_id for _ in range(9)] == first
    other = stratified(by_doc, seed=1)
    assert [next(other).doc_id for _ in range(9)] != first


def _passage(doc_id: str, text: str, title: str = "") -> Passage:
    return Passage(doc_id, 0, len(text), text, title, "en")


def test_related_pairs_share_rare_words_across_documents_and_skip_near_copies() -> None:
    filler = [
        _passage(f"f{i}", f"Filler text {i} about gardens, weather and common things.") for i in range(30)
    ]
    khartoum = _passage("a", "Khartoum lies where the White Nile meets the Blue Nile near Omdurman.")
    dam = _passage("b", "The Aswan dam regulates the Blue Nile flood downstream of Khartoum.")
    copy = _passage("c", "Khartoum lies where the White Nile meets the Blue Nile near Omdurman today.")
    pairs = {frozenset((p.doc_id, q.doc_id)) for p, q in related_pairs([*filler, khartoum, dam, copy])}
    assert frozenset(("a", "b")) in pairs
    assert frozenset(("a", "c")) not in pairs  # a near-copy needs no second hop
    assert all(len(pair) == 2 for pair in pairs)


def test_mix_is_parsed_normalized_and_refused_when_wrong() -> None:
    assert parse_mix("factoid=1,unanswerable=1") == {
        "factoid": 0.5,
        "conceptual": 0.0,
        "multi_hop": 0.0,
        "unanswerable": 0.5,
    }
    for bad, message in [
        ("factoid", "KIND=WEIGHT"),
        ("trivia=1", "unknown kind"),
        ("factoid=x", "not a number"),
        ("factoid=-1", ">= 0"),
        ("factoid=0", "positive"),
        ("factoid=1,factoid=2", "twice"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_mix(bad)


@pytest.mark.parametrize("n", [1, 7, 10, 200, 333])
def test_allocation_sums_to_n(n: int) -> None:
    counts = allocate(n, parse_mix("factoid=0.4,conceptual=0.3,multi_hop=0.2,unanswerable=0.1"))
    assert sum(counts.values()) == n and set(counts) == set(KINDS)
    if n == 200:
        assert counts == {"factoid": 80, "conceptual": 60, "multi_hop": 40, "unanswerable": 20}


def test_replies_are_read_leniently_and_refused_when_unusable() -> None:
    fenced = 'Here you go:\n```json\n{"Question": "متى ولد؟", "answer": "١٩٥٨"}\n```'
    assert parse_generated(fenced, with_answer=True) == ("متى ولد؟", "١٩٥٨")
    assert parse_generated('[{"question": "Why?"}]', with_answer=False) == ("Why?", None)
    with pytest.raises(ParseError):
        parse_generated('{"question": "Why?"}', with_answer=True)
    with pytest.raises(ParseError):
        parse_generated("no json at all", with_answer=False)
    assert parse_check('{"supported": "نعم", "reason": "..."}', "supported") is True
    assert parse_check('{"answerable": 0}', "answerable") is False
    with pytest.raises(ParseError):
        parse_check('{"reason": "fine"}', "supported")
    assert parse_closed_book('{"answer": null}') is None
    assert parse_closed_book('{"answer": "لا أعرف"}') is None  # a refusal is not an answer
    assert parse_closed_book('{"answer": "Cairo"}') == "Cairo"
    with pytest.raises(ParseError):
        parse_closed_book('{"reply": "Cairo"}')


def test_filters() -> None:
    assert wrong_script("What is the capital?", "ar") and not wrong_script("ما هي العاصمة؟", "ar")
    assert wrong_script("پایتخت کجاست؟", "en") and not wrong_script("Where is Khartoum?", "en")
    assert persian_letters("كيف يكون") == "کیف یکون"
    assert length_problem("short", None, min_chars=10, max_chars=50, max_answer_words=None) is not None
    assert length_problem("a fine question?", "one two three", min_chars=5, max_chars=50, max_answer_words=2)
    assert (
        length_problem("a fine question?", "one two", min_chars=5, max_chars=50, max_answer_words=2) is None
    )
    index = DuplicateIndex(0.8)
    index.add("متى تأسست جامعة القاهرة؟", "ar")
    assert index.duplicate("متى تأسّست جامعة القاهره ؟", "ar")  # folded spelling, same tokens
    assert not index.duplicate("أين تقع جامعة القاهرة؟", "ar")


def test_prompts_exist_for_every_kind_and_language_and_pass_their_material_in_tags() -> None:
    for kind in KINDS:
        for lang in ("ar", "fa", "en"):
            assert "JSON" in GENERATE[kind][lang].system
    assert all("ي" not in t.system and "ك" not in t.system for t in (GENERATE[k]["fa"] for k in KINDS))
    pair = (_passage("a", "First."), Passage("b", 0, 7, "Second.", 'The "B"', "en"))
    block = passage_block(pair)
    assert '<passage id="1">\n⟦data⟧\nFirst.\n⟦/data⟧\n</passage>' in block and "title=\"The 'B'\"" in block
    assert avoid_block("fa", []) == "" and "- q1" in avoid_block("fa", ["q1"])


def test_settings_fingerprint_follows_what_shapes_the_set() -> None:
    base = SynthConfig(n=10, llm="openai/m")  # type: ignore[arg-type]
    assert base.llm.model == "openai/m"
    same = SynthConfig(n=10, llm={"model": "openai/m", "timeout": 5, "max_concurrency": 2})  # type: ignore[arg-type]
    assert same.fingerprint() == base.fingerprint()  # how replies are fetched changes nothing
    for change in ({"seed": 1}, {"n": 11}, {"mix": {"factoid": 1.0}}, {"llm": "openai/other"}):
        assert (
            SynthConfig.model_validate({"n": 10, "llm": "openai/m", **change}).fingerprint()
            != base.fingerprint()
        )
    with pytest.raises(ValidationError):
        SynthConfig(n=10, llm="openai/m", min_passage_chars=500, max_passage_chars=100)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        SynthConfig(n=10, llm="openai/m", mix={"trivia": 1.0})  # type: ignore[arg-type]


def test_public_settings_keep_no_secret_from_the_endpoint_url() -> None:
    """The report file and its MLflow params are built from ``public()``: a password or a key in the
    endpoint's URL stays out of both, the variable that holds the key is named."""
    config = SynthConfig.model_validate(
        {
            "n": 10,
            "llm": {
                "model": "openai/m",
                "api_base": "https://writer:hunter2@llm.example/v1?api-key=hunter3&region=eu",
                "api_key_env": "WRITER_KEY",
            },
        }
    )
    public = config.public()
    assert "hunter2" not in str(public) and "hunter3" not in str(public)
    assert public["llm"]["api_base"].startswith("https://***@llm.example/v1?")
    assert "region=eu" in public["llm"]["api_base"] and public["llm"]["api_key_env"] == "WRITER_KEY"
