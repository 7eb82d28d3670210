"""Chunkers: exact offsets, stable ids, full coverage and size bounds for every method, plus the
behaviour each method promises on Arabic and Persian punctuation (؟ ، ؛ and newlines)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import re
from pathlib import Path
from typing import get_args

import pytest

from composer.chunking import Chunk, chunk_corpus, chunk_document
from composer.chunking.config import ChunkingConfig
from composer.chunking.methods import METHODS
from composer.data.types import Corpus, Document
from composer.text import sentence_spans

ALL_METHODS = ["paragraph", "fixed_chars", "sentence", "recursive"]
SIZES = [(50, 0), (120, 100), (200, 0), (300, 90), (800, 0)]
PUNCT = set(".!?؟؛،,…\"'»”)]")


def _cfg(method: str, size: int = 800, overlap: int = 0) -> ChunkingConfig:
    return ChunkingConfig(method=method, size=size, overlap=overlap)  # type: ignore[arg-type]


def _read_docs(path: Path) -> list[Document]:
    with path.open(encoding="utf-8") as f:
        return [Document(r["id"], r["text"], r.get("title", "")) for r in map(json.loads, f)]


@pytest.fixture(scope="module")
def real_docs(arcd_dir: Path, persianqa_dir: Path) -> list[Document]:
    return _read_docs(arcd_dir / "corpus.jsonl") + _read_docs(persianqa_dir / "corpus.jsonl")


def _multi_paragraph(docs: list[Document], rng: random.Random) -> list[Document]:
    """Documents of several real paragraphs joined by blank lines, bare newlines or messy whitespace."""
    out = []
    for n in range(60):
        parts = [d.text for d in rng.sample(docs, rng.randint(2, 6))]
        if n % 5 == 0:
            parts.insert(rng.randint(0, len(parts)), "عنوان قصير")  # a heading
        sep = ["\n\n", "\n", " \n \t\n  ", "\r\n\r\n"][n % 4]
        out.append(Document(f"multi-{n}", "  " * (n % 2) + sep.join(parts) + "\n" * (n % 3)))
    return out


_VOCAB = [
    "كتاب", "المدينة", "السعودية", "مستشار", "می‌شود", "کتاب‌ها", "دانشگاه", "تهران", "word", "the",
    "1958", "1,000", "3.14", "(13", "أكتوبر)", "«سلطنتی»", "u.s.", "ـ", "۱۹۲۰",
]
_SEPS = [" ", " ", " ", " ", "  ", "، ", "،", ", ", ". ", "؟ ", "؛ ", "! ", "? ", "\n", "\n\n", " \n\t\n ",
         "\t", "… "]


def _random_docs(n: int, seed: int) -> list[Document]:
    """Texts mixing Arabic, Persian and Latin words, every separator, and now and then a huge word."""
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        parts = []
        for _ in range(rng.randint(0, 300)):
            word = rng.choice(_VOCAB) if rng.random() > 0.01 else "ا" * rng.randint(40, 900)
            parts += [word, rng.choice(_SEPS)]
        docs.append(Document(f"rand-{i}", rng.choice(["", " ", "\n"]) + "".join(parts)))
    return docs


def _check_invariants(doc: Document, chunks: list[Chunk], cfg: ChunkingConfig) -> None:
    text = doc.text
    covered = 0
    for i, c in enumerate(chunks):
        assert (c.doc_id, c.index, c.id) == (doc.id, i, f"{doc.id}#{i}")
        assert c.text == text[c.start : c.end]
        assert c.text and c.text == c.text.strip(), "chunks are trimmed and never empty"
        assert len(c.text) <= cfg.size
        assert text[covered : c.start].strip() == "", f"non-space text before {c.id} is in no chunk"
        covered = max(covered, c.end)
        if i:
            prev = chunks[i - 1]
            assert prev.start < c.start and prev.end < c.end, "each chunk moves forward"
            assert prev.end - c.start <= cfg.overlap, "overlap never exceeds cfg.overlap"
        # Cuts fall between words or after punctuation, except inside a word longer than size.
        for pos in (c.start, c.end):
            if 0 < pos < len(text) and not (text[pos - 1].isspace() or text[pos].isspace()):
                assert text[pos - 1] in PUNCT or _inside_long_word(text, pos, cfg.size), (c.id, pos)
    assert text[covered:].strip() == "", "non-space text at the end is in no chunk"


def _inside_long_word(text: str, pos: int, size: int) -> bool:
    return any(m.start() < pos < m.end() and m.end() - m.start() > size for m in re.finditer(r"\S+", text))


@pytest.mark.parametrize("method", ALL_METHODS)
@pytest.mark.parametrize(("size", "overlap"), SIZES)
def test_invariants_on_real_and_generated_documents(
    real_docs: list[Document], method: str, size: int, overlap: int
) -> None:
    cfg = _cfg(method, size, overlap)
    docs = real_docs + _multi_paragraph(real_docs, random.Random(7)) + _random_docs(150, seed=size)
    for doc in docs:
        chunks = chunk_document(doc, cfg)
        _check_invariants(doc, chunks, cfg)
        assert chunk_document(doc, cfg) == chunks, "deterministic"


def test_every_configurable_method_has_a_chunker() -> None:
    assert set(get_args(ChunkingConfig.model_fields["method"].annotation)) == set(METHODS)


@pytest.mark.parametrize("method", ALL_METHODS)
def test_a_document_that_fits_is_one_chunk(real_docs: list[Document], method: str) -> None:
    cfg = _cfg(method, size=2500)
    assert max(len(d.text) for d in real_docs) <= 2500
    for doc in real_docs:
        lead = len(doc.text) - len(doc.text.lstrip())
        assert [(c.text, c.start) for c in chunk_document(doc, cfg)] == [(doc.text.strip(), lead)]


@pytest.mark.parametrize("method", ALL_METHODS)
def test_empty_and_blank_documents_have_no_chunks(method: str) -> None:
    for text in ("", "   ", "\n\n\t \n"):
        assert chunk_document(Document("d", text), _cfg(method)) == []


def test_chunk_is_frozen_and_slotted() -> None:
    chunk = chunk_document(Document("d", "نص قصير."), _cfg("paragraph"))[0]
    assert chunk == Chunk(id="d#0", doc_id="d", text="نص قصير.", start=0, end=8, index=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        chunk.text = "x"  # type: ignore[misc]
    assert not hasattr(chunk, "__dict__")


def test_chunk_corpus_is_the_documents_chunks_in_order(real_docs: list[Document]) -> None:
    corpus = Corpus(real_docs[:120])
    cfg = _cfg("sentence", 200, 50)
    chunks = chunk_corpus(corpus, cfg)
    assert chunks == [c for d in corpus for c in chunk_document(d, cfg)]
    assert len({c.id for c in chunks}) == len(chunks) > len(corpus)
    # A document's chunk ids do not depend on its neighbours in the corpus.
    alone = chunk_corpus(Corpus([real_docs[5]]), cfg)
    assert alone == [c for c in chunks if c.doc_id == real_docs[5].id]


# --- paragraph ---------------------------------------------------------------------------------------

PARA_1 = "جمال أحمد حمزة خاشقجي صحفي وإعلامي سعودي، رأس عدّة مناصب لعدد من الصحف في السعودية."
PARA_2 = "غادر خاشقجي السعودية في سبتمبر 2017، وكتب بعد ذلك مقالات صحفية انتقد فيها الحكومة."
PARA_3 = "باشگاه فوتبال رئال مادرید یک باشگاه حرفه‌ای فوتبال است که در مادرید قرار دارد؟"


def _texts(text: str, method: str, size: int = 800, overlap: int = 0) -> list[str]:
    return [c.text for c in chunk_document(Document("d", text), _cfg(method, size, overlap))]


def test_paragraph_one_chunk_per_blank_line_separated_paragraph() -> None:
    text = f"{PARA_1}\n\n{PARA_2}\n   \n{PARA_3}\n"
    assert _texts(text, "paragraph", size=300) == [PARA_1, PARA_2, PARA_3]


def test_paragraph_single_newlines_are_paragraphs_only_without_blank_lines() -> None:
    assert _texts(f"{PARA_1}\n{PARA_2}\n{PARA_3}", "paragraph", size=300) == [PARA_1, PARA_2, PARA_3]
    wrapped = f"{PARA_1}\n{PARA_2}"  # a hard-wrapped paragraph: the blank line is the separator
    assert _texts(f"{wrapped}\n\n{PARA_3}", "paragraph", size=300) == [wrapped, PARA_3]


def test_paragraph_short_paragraphs_join_up_to_a_quarter_of_size() -> None:
    text = f"تاريخ\n\n{PARA_1}\n\n{PARA_2}\n\nانظر أيضا"
    # size 300: paragraphs under 75 chars join the next one, a short tail joins the previous one.
    assert _texts(text, "paragraph", size=300) == [f"تاريخ\n\n{PARA_1}", f"{PARA_2}\n\nانظر أيضا"]
    # size 800: groups grow until they reach 200 chars.
    three = f"{PARA_1}\n\n{PARA_2}\n\n{PARA_3}"
    assert _texts(f"{three}\n\n{three}", "paragraph", size=800) == [three, three]
    # Joining never exceeds size: a heading before a paragraph that fills size stays alone.
    assert _texts(f"تاريخ\n\n{PARA_1}", "paragraph", size=len(PARA_1)) == ["تاريخ", PARA_1]


def test_paragraph_longer_than_size_is_cut_at_sentence_ends_and_stays_in_its_paragraph() -> None:
    long_para = " ".join([PARA_1, PARA_2, PARA_3, PARA_1, PARA_2])
    chunks = _texts(f"{long_para}\n\n{PARA_3}", "paragraph", size=200, overlap=0)
    assert chunks[-1] == PARA_3
    assert "".join(chunks[:-1]).replace(" ", "") == long_para.replace(" ", "")
    assert all(c[-1] in ".؟" for c in chunks)


def test_paragraph_overlap_stays_inside_a_paragraph() -> None:
    long_para = " ".join([PARA_1, PARA_2, PARA_3] * 3)
    doc = Document("d", f"{long_para}\n\n{PARA_1}")
    chunks = chunk_document(doc, _cfg("paragraph", size=250, overlap=120))
    inside = [c for c in chunks if c.end <= len(long_para)]
    assert any(a.end > b.start for a, b in itertools.pairwise(inside)), "sentences overlap"
    assert chunks[-1].text == PARA_1 and chunks[-2].end < chunks[-1].start


# --- fixed_chars -------------------------------------------------------------------------------------


def test_fixed_chars_fills_windows_and_cuts_only_between_words(real_docs: list[Document]) -> None:
    cfg = _cfg("fixed_chars", size=150)
    for doc in real_docs[:200]:
        chunks = chunk_document(doc, cfg)
        for c, nxt in itertools.pairwise(chunks):
            next_word_end = nxt.start + len(nxt.text.split()[0])
            assert next_word_end - c.start > 150, "a window stops only when the next word does not fit"
            assert doc.text[c.end].isspace() and doc.text[nxt.start - 1].isspace()


def test_fixed_chars_overlap_is_whole_words_up_to_overlap() -> None:
    text = " ".join(f"کلمه{i}" for i in range(400))
    chunks = chunk_document(Document("d", text), _cfg("fixed_chars", size=100, overlap=30))
    overlaps = [a.end - b.start for a, b in itertools.pairwise(chunks)]
    assert all(0 < o <= 30 for o in overlaps)
    assert all(text[b.start - 1] == " " for b in chunks[1:])


def test_fixed_chars_cuts_a_word_longer_than_size() -> None:
    word = "ب" * 250
    chunks = chunk_document(Document("d", f"قبل {word} بعد"), _cfg("fixed_chars", size=100))
    assert [c.text for c in chunks] == ["قبل", "ب" * 100, "ب" * 100, "ب" * 50 + " بعد"]


# --- sentence ----------------------------------------------------------------------------------------

AR_SENTENCES = ["ما هي عاصمة مصر؟", "القاهرة هي العاصمة، وأكبر مدنها؛", "وتقع على ضفاف النيل.",
                "هل زرتها من قبل؟", "نعم، زرتها مرتين!"]
FA_SENTENCES = ["پایتخت ایران کجاست؟", "تهران، بزرگ‌ترین شهر کشور است؛", "جمعیت آن زیاد است.",
                "آیا آن‌جا را دیده‌اید؟", "بله، دو بار."]


@pytest.mark.parametrize("sentences", [AR_SENTENCES, FA_SENTENCES], ids=["ar", "fa"])
def test_sentence_keeps_sentences_whole_at_arabic_and_persian_stops(sentences: list[str]) -> None:
    text = " ".join(sentences)
    assert [text[s:e] for s, e in sentence_spans(text)] == sentences, "، does not end a sentence"
    for size in range(50, len(text), 7):
        chunks = _texts(text, "sentence", size=size)
        assert " ".join(chunks) == text
        assert all(c.endswith(tuple("؟؛.!")) for c in chunks)


def test_sentence_newline_ends_a_sentence_without_a_stop() -> None:
    lines = ["سطر أول بلا نقطة في آخره", "سطر ثان بلا نقطة أيضا", "سطر ثالث"]
    assert _texts("\n".join(lines), "sentence", size=50) == [lines[0], f"{lines[1]}\n{lines[2]}"]


def test_sentence_longer_than_size_is_cut_after_arabic_commas_first() -> None:
    clauses = [f"البند رقم {i} من القائمة الطويلة جدا،" for i in range(8)]
    text = " ".join(clauses) + " وانتهت القائمة."
    chunks = _texts(text, "sentence", size=120)
    assert len(chunks) > 1
    assert all(c.endswith("،") for c in chunks[:-1]) and chunks[-1].endswith("انتهت القائمة.")


def test_sentence_packs_evenly_without_a_scrap_at_the_end() -> None:
    sentence = "هذه جملة قصيرة للاختبار."
    text = " ".join([sentence] * 36)  # ~1.1 x size
    lengths = [len(c) for c in _texts(text, "sentence", size=800)]
    assert len(lengths) == 2 and min(lengths) > 350


# --- recursive ---------------------------------------------------------------------------------------


def test_recursive_prefers_coarser_separators() -> None:
    two_sentences = f"{PARA_1} {PARA_2}"
    text = f"{two_sentences}\n\n{PARA_3}\n{two_sentences}"
    # Blank line, then the newline; packing sentences greedily would give PARA_3 + PARA_1, PARA_2.
    assert _texts(text, "recursive", size=170) == [two_sentences, PARA_3, two_sentences]
    assert _texts(text, "recursive", size=100) == [PARA_1, PARA_2, PARA_3, PARA_1, PARA_2]


def test_recursive_cuts_a_long_sentence_after_arabic_comma_before_latin_comma() -> None:
    text = "الجزء الأول من الجملة, وفيه فاصلة لاتينية، الجزء الثاني من الجملة, وفيه فاصلة أخرى"
    cut = text.index("،") + 1
    assert _texts(text, "recursive", size=60) == [text[:cut], text[cut + 1 :]]


def test_recursive_shares_overlap_between_neighbouring_pieces() -> None:
    text = " ".join([PARA_1, PARA_2, PARA_3] * 4)
    chunks = chunk_document(Document("d", text), _cfg("recursive", size=300, overlap=100))
    overlaps = [a.end - b.start for a, b in itertools.pairwise(chunks)]
    assert all(0 < o <= 100 for o in overlaps)
