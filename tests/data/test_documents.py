"""Corpus folders of PDF, Word, PowerPoint, HTML and Markdown files (issue 17), read back against the known
text they were written from with real writer libraries (fpdf2, python-docx, python-pptx)."""

from __future__ import annotations

import difflib
import logging
import re
import sqlite3
import zipfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import pytest
from typer.testing import CliRunner

import composer
from composer.chunking import chunk_document
from composer.chunking.config import ChunkingConfig
from composer.data import Document, load_corpus, load_questions
from composer.data.documents import folder as folder_module
from composer.data.documents.cache import FILENAME
from composer.data.documents.repair import repair_pages
from composer.errors import InputError

arabic_reshaper = pytest.importorskip("arabic_reshaper", reason="test extra arabic-reshaper not installed")
fpdf = pytest.importorskip("fpdf", reason="test extra fpdf2 not installed")


def _arabic_font() -> Path | None:
    """DejaVu Sans draws Arabic and Persian letters and their presentation forms: Debian's copy, or the one
    matplotlib (an MLflow dependency) ships."""
    candidates = [Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")]
    try:
        import matplotlib

        candidates.append(Path(matplotlib.__file__).parent / "mpl-data" / "fonts" / "ttf" / "DejaVuSans.ttf")
    except ImportError:
        pass
    return next((p for p in candidates if p.is_file()), None)


FONT = _arabic_font()
needs_font = pytest.mark.skipif(FONT is None, reason="no TTF font with Arabic glyphs (DejaVu Sans) found")

ARABIC_PAGES = [
    [
        "ذهب الطالب إلى المدرسة في الصباح الباكر، وقرأ كتاب التاريخ مع أصدقائه في المكتبة الكبيرة.",
        "قال المعلم إن الامتحان سيكون في الأسبوع القادم، ولا بد من الاستعداد الجيد له منذ الآن.",
    ],
    [
        "تقع مدينة القاهرة على ضفاف نهر النيل، وهي من أكبر المدن العربية وأكثرها سكانا.",
        "يزور السياح الأهرامات كل عام للتعرف على تاريخ الحضارة المصرية القديمة وآثارها.",
    ],
    [
        "السلام عليكم جميعا، هذا هو الفصل الأخير من الكتاب الذي يتحدث عن الإسلام والعلوم.",
        "لا يمكن فهم العلوم الحديثة دون معرفة إسهامات العلماء العرب في الطب والفلك والرياضيات.",
    ],
]
PERSIAN_PAGES = [
    [
        "دانشجویان ایرانی هر روز به کتابخانه می‌روند و کتاب‌های تاریخی را با دقت می‌خوانند.",
        "استاد گفت که امتحان پایانی در هفته آینده برگزار خواهد شد و همه باید آماده باشند.",
    ],
    [
        "شهر اصفهان یکی از زیباترین شهرهای ایران است و گردشگران زیادی از آن دیدن می‌کنند.",
        "پل‌های تاریخی این شهر بر روی رودخانه زاینده‌رود ساخته شده‌اند و بسیار مشهور هستند.",
    ],
    [
        "زبان فارسی در کشورهای ایران، افغانستان و تاجیکستان به عنوان زبان رسمی شناخته می‌شود.",
        "شاعران بزرگی مانند حافظ و سعدی آثار ماندگاری به این زبان نوشته‌اند که هنوز خوانده می‌شوند.",
    ],
]
HEADER = {"ar": "التقرير السنوي للمؤسسة", "fa": "گزارش سالانه سازمان"}
FOOTER = {"ar": "صفحة {n}", "fa": "صفحه {n}"}

# How each kind of PDF stores a line: as typed, as drawn (presentation forms, right to left), or drawn
# with base letters.
ORDERS: dict[str, Callable[[str], str]] = {
    "logical": lambda line: line,
    "logical_forms": lambda line: arabic_reshaper.reshape(line),
    "visual_forms": lambda line: arabic_reshaper.reshape(line)[::-1],
    "visual_letters": lambda line: line[::-1],
}


def _lines(paragraph: str, words: int = 7) -> list[str]:
    parts = paragraph.split(" ")
    return [" ".join(parts[i : i + words]) for i in range(0, len(parts), words)]


def _write_pdf(
    path: Path, pages: list[list[str]], store: Callable[[str], str], header: str, footer: str
) -> None:
    pdf = fpdf.FPDF()
    pdf.add_font("dejavu", "", str(FONT))
    pdf.set_font("dejavu", size=12)
    pdf.set_auto_page_break(False)  # the footer line stays on its page
    for number, paragraphs in enumerate(pages, start=1):
        pdf.add_page()
        pdf.cell(0, 10, store(header), new_x="LMARGIN", new_y="NEXT")
        for paragraph in paragraphs:
            for line in _lines(paragraph):
                pdf.cell(0, 8, store(line), new_x="LMARGIN", new_y="NEXT")
            pdf.ln(6)
        pdf.set_y(-20)
        pdf.cell(0, 10, store(footer.format(n=number)), new_x="LMARGIN", new_y="NEXT")
    pdf.output(str(path))


def _similarity(a: str, b: str) -> float:
    """Character-level similarity (difflib's ratio) of the two texts, whitespace runs as one space."""
    return difflib.SequenceMatcher(None, " ".join(a.split()), " ".join(b.split()), autojunk=False).ratio()


def _pages_of(doc: Document) -> list[tuple[int, str]]:
    marks = [(int(o), int(p)) for o, p in doc.metadata["pages"]]
    ends = [o for o, _ in marks[1:]] + [len(doc.text)]
    return [(p, doc.text[o:e]) for (o, p), e in zip(marks, ends, strict=True)]


# -- Arabic and Persian PDFs ---------------------------------------------------------------------------

FIGURES: dict[str, tuple[float, float]] = {}


@needs_font
@pytest.mark.parametrize("order", list(ORDERS))
@pytest.mark.parametrize("lang", ["ar", "fa"])
def test_arabic_and_persian_pdfs_read_back_as_typed(tmp_path: Path, lang: str, order: str) -> None:
    from pypdf import PdfReader

    pages = ARABIC_PAGES if lang == "ar" else PERSIAN_PAGES
    path = tmp_path / f"{lang}-{order}.pdf"
    _write_pdf(path, pages, ORDERS[order], HEADER[lang], FOOTER[lang])
    corpus = load_corpus(path, cache_dir=tmp_path / "cache")
    (doc,) = corpus.documents
    assert doc.id == path.name
    expected = "\n\n".join(" ".join(paragraphs) for paragraphs in pages)
    raw = "\n\n".join(page.extract_text() for page in PdfReader(path).pages)
    before, after = _similarity(raw, expected), _similarity(doc.text, expected)
    FIGURES[f"{lang}/{order}"] = (before, after)
    print(f"\n{lang} {order}: similarity before repair {before:.3f}, after {after:.3f}")
    assert after >= 0.98, doc.text
    # Page numbers: each page's text is the text written on that page, headers and footers dropped.
    found = _pages_of(doc)
    assert [n for n, _ in found] == [1, 2, 3]
    for (_, text), paragraphs in zip(found, pages, strict=True):
        assert _similarity(text, " ".join(paragraphs)) >= 0.98
    assert HEADER[lang] not in doc.text and FOOTER[lang].format(n=2) not in doc.text
    assert corpus.tally is not None
    repairs = corpus.tally.repairs
    assert repairs["headers_footers"] == 6 and repairs["line_breaks"] > 0
    if "forms" in order:
        assert repairs["presentation_forms"] > 100
        assert not any("\ufb50" <= ch <= "\ufeff" for ch in doc.text)
    if lang == "ar" and "forms" in order:
        assert repairs["lam_alef"] > 0  # لا, السلام, الإسلام drawn as one glyph
    assert before < 0.98  # pypdf orders right-to-left runs itself: text stored as typed comes out reversed
    assert corpus.tally.pages == 3 and corpus.tally.files_read == 1


def test_repairs_of_controls_tatweel_hyphens_and_mixed_lines() -> None:
    repairs: Counter[str] = Counter()
    (page,) = repair_pages(["\u200fكـــتاب\u200e جديد\nthe retrie-\nval study", ], repairs)
    assert page == "كتاب جديد the retrieval study"
    assert repairs == Counter(bidi_controls=2, tatweel=3, line_breaks=1, hyphenation=1)
    # A visual-order line keeps its Latin words and numbers in their own order, brackets mirrored back.
    typed = "صدر تقرير Composer RAG في عام 2024 (النسخة الثانية) عن المكتبة الوطنية"
    drawn = re.sub(r"[A-Za-z0-9][A-Za-z0-9 ]*[A-Za-z0-9]", lambda m: m.group()[::-1], typed[::-1])
    drawn = drawn.translate(str.maketrans("()", ")("))  # a right-to-left line draws "(" mirrored
    assert drawn.startswith("ةينطولا ةبتكملا نع (") and "Composer RAG" in drawn
    repairs.clear()
    (page,) = repair_pages([drawn], repairs)
    assert page == typed and repairs["visual_order"] == 1


# -- Word, PowerPoint, HTML, Markdown ------------------------------------------------------------------


def _write_docx(path: Path) -> None:
    import docx

    document = docx.Document()
    document.add_heading("دليل المستخدم", level=1)
    document.add_paragraph("هذا الدليل يشرح طريقة تثبيت البرنامج واستخدامه.")
    document.add_heading("التثبيت", level=2)
    document.add_paragraph("حمّل الحزمة ثم شغّل أمر التثبيت من الطرفية.")
    document.add_heading("Linux", level=3)
    document.add_paragraph("On Linux run make install.")
    document.add_heading("الاستخدام", level=2)
    table = document.add_table(rows=2, cols=2)
    for r, row in enumerate([("الأمر", "الوصف"), ("index", "يبني الفهرس")]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    document.save(str(path))


def test_word_headings_title_and_sections(tmp_path: Path) -> None:
    _write_docx(tmp_path / "guide.docx")
    (doc,) = load_corpus(tmp_path, cache_dir=tmp_path / ".cache").documents
    assert doc.title == "دليل المستخدم"
    assert "On Linux run make install." in doc.text and "index | يبني الفهرس" in doc.text
    headings = {h: doc.text[o:].split("\n")[0] for o, h in doc.metadata["headings"]}
    assert headings == {
        "دليل المستخدم": "دليل المستخدم",
        "دليل المستخدم > التثبيت": "التثبيت",
        "دليل المستخدم > التثبيت > Linux": "Linux",
        "دليل المستخدم > الاستخدام": "الاستخدام",
    }
    whole = chunk_document(doc, ChunkingConfig(size=2000))
    assert len(whole) == 1
    sections = chunk_document(doc, ChunkingConfig(size=2000, respect="section"))
    assert [c.heading for c in sections] == list(headings)
    linux = next(c for c in sections if "make install" in c.text)
    assert linux.heading == "دليل المستخدم > التثبيت > Linux" and linux.title == "دليل المستخدم"


@needs_font
def test_titles_are_the_files_own(tmp_path: Path) -> None:
    import docx

    pdf = fpdf.FPDF()
    pdf.add_font("dejavu", "", str(FONT))
    pdf.set_font("dejavu", size=12)
    pdf.set_title("دليل التثبيت")
    pdf.add_page()
    pdf.cell(0, 10, "نص الصفحة الأولى")
    pdf.output(str(tmp_path / "a.pdf"))
    pdf = fpdf.FPDF()
    pdf.add_font("dejavu", "", str(FONT))
    pdf.set_font("dejavu", size=12)
    pdf.add_page()
    pdf.cell(0, 10, "بلا عنوان")
    pdf.output(str(tmp_path / "b.pdf"))
    document = docx.Document()
    document.core_properties.title = "Annual report"
    document.add_heading("Introduction", level=1)
    document.save(str(tmp_path / "c.docx"))
    titles = [d.title for d in load_corpus(tmp_path, cache_dir=tmp_path / ".cache")]
    assert titles == ["دليل التثبيت", "b", "Annual report"]


def test_powerpoint_slides_are_pages(tmp_path: Path) -> None:
    import pptx

    deck = pptx.Presentation()
    for title, body in [("مقدمة", "نظرة عامة على المشروع"), ("النتائج", "تحسن الاسترجاع بنسبة كبيرة")]:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    deck.save(str(tmp_path / "talk.pptx"))
    (doc,) = load_corpus(tmp_path / "talk.pptx", cache_dir=tmp_path / "cache").documents
    assert doc.title == "مقدمة"
    chunks = chunk_document(doc, ChunkingConfig(size=2000, respect="page"))
    assert [(c.citation, c.heading) for c in chunks] == [("talk.pptx, page 1", "مقدمة"),
                                                          ("talk.pptx, page 2", "النتائج")]
    assert "تحسن الاسترجاع" in chunks[1].text


HTML = """<!doctype html><html><head><meta charset="utf-8"><title>أخبار المكتبة</title>
<script>var menu = "قائمة مخفية";</script><style>body {color: red}</style></head>
<body>
<header><a href="/">الصفحة الرئيسية</a> <a href="/about">من نحن</a></header>
<nav><ul><li>أخبار</li><li>رياضة</li><li>اتصل بنا</li></ul></nav>
<div role="navigation">روابط سريعة</div>
<main>
<h1>افتتاح الفرع الجديد</h1>
<p>افتتحت المكتبة الوطنية فرعها الجديد في وسط المدينة \u200fيوم الخميس\u200f.</p>
<h2>ساعات العمل</h2>
<p>يفتح الفرع أبوابه من الساعة الثامنة صباحا حتى الثامنة مساء.</p>
<ul><li>السبت إلى الخميس</li><li>مغلق يوم الجمعة</li></ul>
</main>
<aside>اقرأ أيضا: مقالات ذات صلة</aside>
<footer>جميع الحقوق محفوظة 2024</footer>
</body></html>"""


def test_html_without_navigation_chrome(tmp_path: Path) -> None:
    (tmp_path / "news.html").write_text(HTML, encoding="utf-8")
    corpus = load_corpus(tmp_path, cache_dir=tmp_path / ".cache")
    (doc,) = corpus.documents
    assert doc.title == "أخبار المكتبة"
    assert doc.text.split("\n\n") == [
        "افتتاح الفرع الجديد",
        "افتتحت المكتبة الوطنية فرعها الجديد في وسط المدينة يوم الخميس.",
        "ساعات العمل",
        "يفتح الفرع أبوابه من الساعة الثامنة صباحا حتى الثامنة مساء.",
        "السبت إلى الخميس",
        "مغلق يوم الجمعة",
    ]
    assert [h for _, h in doc.metadata["headings"]] == [
        "افتتاح الفرع الجديد",
        "افتتاح الفرع الجديد > ساعات العمل",
    ]
    assert corpus.tally is not None and corpus.tally.repairs["bidi_controls"] == 2


def test_markdown_title_is_its_first_heading(tmp_path: Path) -> None:
    text = "Intro line\n\n## التثبيت\nنص\n\n```\n# not a heading\n```\n\nالاستخدام\n---------\nنص آخر\n"
    (tmp_path / "notes.md").write_text(text, encoding="utf-8")
    (tmp_path / "plain.txt").write_text("# not markdown\n", encoding="utf-8")
    notes, plain = load_corpus(tmp_path).documents
    assert notes.text == text  # kept exactly
    assert notes.title == "التثبيت" and plain.title == "plain"
    assert [(text[o:].split("\n")[0], h) for o, h in notes.metadata["headings"]] == [
        ("## التثبيت", "التثبيت"),
        ("الاستخدام", "الاستخدام"),
    ]


# -- pages in chunks -----------------------------------------------------------------------------------


@needs_font
def test_chunks_cite_pages_and_respect_them(tmp_path: Path) -> None:
    path = tmp_path / "report.pdf"
    _write_pdf(path, ARABIC_PAGES, ORDERS["visual_forms"], HEADER["ar"], FOOTER["ar"])
    (doc,) = load_corpus(path, cache_dir=tmp_path / "cache").documents
    crossing = chunk_document(doc, ChunkingConfig(method="fixed_chars", size=300))
    assert any(c.last_page != c.page for c in crossing)
    chunks = chunk_document(doc, ChunkingConfig(method="fixed_chars", size=300, respect="page"))
    assert all(c.page == c.last_page for c in chunks)
    pages = [c.page for c in chunks]
    assert pages == sorted(p for p in pages if p is not None) and set(pages) == {1, 2, 3}
    cairo = next(c for c in chunks if "القاهرة" in c.text)
    assert cairo.citation == "report.pdf, page 2"


def test_respect_keeps_the_index_key_of_configs_without_it() -> None:
    from composer.pipeline.config import PipelineConfig

    plain = PipelineConfig()
    assert PipelineConfig.from_dict({"chunking": {"respect": "none"}}).index_key("f") == plain.index_key("f")
    assert PipelineConfig.from_dict({"chunking": {"respect": "page"}}).index_key("f") != plain.index_key("f")


# -- bad files -----------------------------------------------------------------------------------------


def _encrypted_pdf(path: Path) -> None:
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(200, 200)
    writer.encrypt(user_password="secret", algorithm="RC4-128")
    with path.open("wb") as f:
        writer.write(f)


def _scanned_pdf(path: Path) -> None:
    from PIL import Image

    image = tmp = path.with_suffix(".png")
    Image.new("L", (200, 100), color=200).save(tmp)
    pdf = fpdf.FPDF()
    for _ in range(2):
        pdf.add_page()
        pdf.image(str(image), x=10, y=10, w=150)
    pdf.output(str(path))
    tmp.unlink()


def _zip_bomb(path: Path) -> None:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", b"\0" * (20 * 2**20))


def _bad_folder(root: Path) -> None:
    root.mkdir()
    (root / "good.md").write_text("# دليل\nنص سليم", encoding="utf-8")
    corrupt = b"%PDF-1.7\n1 0 obj\n<< /Type /Catalog >>\ngarbage" + bytes(range(256))
    (root / "corrupt.pdf").write_bytes(corrupt)
    _encrypted_pdf(root / "locked.pdf")
    _scanned_pdf(root / "scan.pdf")
    _zip_bomb(root / "bomb.docx")
    (root / "big.html").write_text("<p>" + "كلمة " * 20_000 + "</p>", encoding="utf-8")
    (root / "gone.docx").write_bytes(b"PK")
    (root / "empty.txt").write_text("", encoding="utf-8")
    (root / "picture.png").write_bytes(b"\x89PNG")


EXPECTED_SKIPS = {
    "corrupt.pdf": ("unreadable", "not a readable PDF"),
    "locked.pdf": ("encrypted", "password-protected PDF"),
    "scan.pdf": ("scanned", "scanned PDF: 2 page(s) of images without a text layer"),
    "bomb.docx": ("unreadable", "(a zip bomb?)"),
    "big.html": ("too large", "too large"),
    "gone.docx": ("unreadable", "the file vanished while the folder was read"),
    "empty.txt": ("empty", "empty file"),
    "picture.png": ("unsupported", "unsupported file type"),
}


@pytest.fixture
def bad_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every kind of bad file beside one good one; ``gone.docx`` vanishes between listing and reading (just
    before it is opened) and ``big.html`` is over a lowered size limit (instead of writing 200 MB)."""
    root = tmp_path / "docs"
    _bad_folder(root)
    monkeypatch.setattr(folder_module, "MAX_FILE_BYTES", 100_000)
    original = folder_module.open_regular

    def vanishing(path: Path) -> BinaryIO:
        if path.name == "gone.docx" and path.exists():
            path.unlink()
        return original(path)

    monkeypatch.setattr(folder_module, "open_regular", vanishing)
    return root


def test_bad_files_are_one_line_each_and_the_rest_is_read(
    bad_folder: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="composer"):
        corpus = load_corpus(bad_folder, cache_dir=tmp_path / "cache")
    assert [d.id for d in corpus] == ["good.md"]
    assert corpus.tally is not None
    skipped = {doc_id: (reason, message) for doc_id, reason, message in corpus.tally.skipped}
    assert set(skipped) == set(EXPECTED_SKIPS)
    for doc_id, (reason, fragment) in EXPECTED_SKIPS.items():
        assert skipped[doc_id][0] == reason and fragment in skipped[doc_id][1], (doc_id, skipped[doc_id])
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for name in set(EXPECTED_SKIPS) - {"picture.png"}:
        assert sum(name in w for w in warnings) == 1, (name, warnings)
    assert "skipped 1 file(s) of unsupported types (.png 1)" in caplog.text
    assert "Traceback" not in caplog.text
    # Nothing half-read is cached: the vanished file has no entry; the content-determined skips do.
    rows = sqlite3.connect(tmp_path / "cache" / FILENAME).execute("SELECT value FROM extracted").fetchall()
    assert len(rows) == 4  # corrupt, locked, scan, bomb
    lines = corpus.tally.lines()
    assert lines[0].startswith("read 1 file(s) (1 .md; 0 from cache)") and lines[0].endswith("8 skipped")
    assert lines[1] == (
        "skipped 8 file(s): 1 empty, 1 encrypted, 1 scanned, 1 too large, 3 unreadable, 1 unsupported"
    )


def test_strict_makes_a_skipped_file_an_error(bad_folder: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"8 file\(s\) skipped \(big.html: too large.*--strict"):
        load_corpus(bad_folder, strict=True, cache_dir=tmp_path / "cache")


def test_index_cli_strict_exits_2_and_report_lists_skips(
    bad_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from composer.cli.app import app

    monkeypatch.setenv("COMPOSER_CACHE_DIR", str(tmp_path / "cache"))
    config = tmp_path / "bm25.yaml"
    config.write_text("retrieval: {mode: bm25}\nchunking: {respect: section}\n", encoding="utf-8")
    base = ["index", str(bad_folder), "--config", str(config), "--workdir", str(tmp_path / "work")]
    result = CliRunner().invoke(app, [*base, "--strict"])
    assert result.exit_code == 2, result.output
    *warnings, error = result.stderr.strip().split("\n")
    assert error.startswith("error: ") and "--strict" in error
    assert len(warnings) == 8 and all(w.startswith("warning: ") for w in warnings)
    result = CliRunner().invoke(app, [*base, "--report"])
    assert result.exit_code == 0, result.output
    assert "scan.pdf: scanned PDF: 2 page(s) of images without a text layer (no OCR)" in result.stdout
    assert "1 documents, 1 chunks" in result.stdout
    assert (tmp_path / "cache" / FILENAME).is_file()  # $COMPOSER_CACHE_DIR holds the extracted text
    summary = CliRunner().invoke(app, base)  # without --report: the summary line only
    assert summary.exit_code == 0, summary.output
    assert summary.stdout.startswith("read 1 file(s) (1 .md; 0 from cache)")
    assert "scan.pdf" not in summary.stdout


def test_all_files_bad_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty.pdf").write_bytes(b"")
    with pytest.raises(InputError, match="no file here gives a document: 1 file"):
        load_corpus(tmp_path, cache_dir=tmp_path / "cache")


# -- cache and fingerprint -----------------------------------------------------------------------------


def test_unchanged_folder_is_read_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    _write_docx(root / "guide.docx")
    (root / "news.html").write_text(HTML, encoding="utf-8")
    first = load_corpus(root, cache_dir=tmp_path / "cache")

    def never(data: bytes, stem: str) -> None:
        raise AssertionError("an unchanged file was extracted again")

    with monkeypatch.context() as m:
        m.setitem(folder_module.EXTRACTED, ".docx", never)
        m.setitem(folder_module.EXTRACTED, ".html", never)
        again = load_corpus(root, cache_dir=tmp_path / "cache")
    assert again.documents == first.documents and again.fingerprint() == first.fingerprint()
    assert again.tally is not None and again.tally.from_cache == 2
    (root / "news.html").write_text(HTML.replace("الثامنة مساء", "العاشرة مساء"), encoding="utf-8")
    changed = load_corpus(root, cache_dir=tmp_path / "cache")
    assert changed.tally is not None and changed.tally.from_cache == 1
    assert changed.fingerprint() != first.fingerprint()


# -- end to end: a folder of mixed files -> synth -> optimize -> export -> cited hits ------------------

E2E_SPACE = """
defaults:
  chunking: {method: paragraph, size: 400, respect: page}
dimensions:
  retrieval.mode: {choices: [bm25]}
  retrieval.k: {choices: [3, 5]}
"""
E2E_EXPERIMENT = """
name: folder
corpus: docs
questions: questions.jsonl
search_space: space.yaml
objective: {k: 3}
sampler: {name: random, seed: 0}
pruner: none
n_trials: 2
batch_size: 20
mlflow: {traces: 0}
workdir: work
"""


@pytest.mark.slow
@needs_font
def test_a_folder_goes_through_synth_optimize_and_export_with_page_citations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fake_llm_server import FakeLLMServer
    from scripted_synth import ScriptedSynth

    from composer.chunking import chunk_corpus
    from composer.cli.app import app

    monkeypatch.setenv("COMPOSER_CACHE_DIR", str(tmp_path / "cache"))
    docs = tmp_path / "docs"
    docs.mkdir()
    _write_pdf(docs / "report.pdf", ARABIC_PAGES, ORDERS["visual_forms"], HEADER["ar"], FOOTER["ar"])
    _write_pdf(docs / "farsi.pdf", PERSIAN_PAGES, ORDERS["logical"], HEADER["fa"], FOOTER["fa"])
    _write_docx(docs / "guide.docx")
    (docs / "news.html").write_text(HTML, encoding="utf-8")
    corpus = load_corpus(docs)
    with FakeLLMServer(ScriptedSynth(corpus)) as server:
        result = CliRunner().invoke(app, [
            "synth", str(docs), "--n", "12", "--llm", "openai/writer", "--llm-base", server.url,
            "--out", str(tmp_path / "questions.jsonl"), "--workdir", str(tmp_path / "work"), "--retries", "1",
        ], env={"COLUMNS": "240"})
    assert result.exit_code == 0, result.output
    written = load_questions(tmp_path / "questions.jsonl")
    assert {d for q in written for d in q.relevant_ids} <= {d.id for d in corpus}
    assert any(d.endswith(".pdf") for q in written for d in q.relevant_ids)
    (tmp_path / "space.yaml").write_text(E2E_SPACE, encoding="utf-8")
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text(E2E_EXPERIMENT, encoding="utf-8")
    result = CliRunner().invoke(app, ["optimize", str(experiment)])
    assert result.exit_code == 0, result.output
    best = tmp_path / "best.yaml"
    result = CliRunner().invoke(app, ["export", "folder", "-e", str(experiment), "--out", str(best)])
    assert result.exit_code == 0, result.output
    pipeline = composer.load_pipeline(best, docs, workdir=tmp_path / "work")
    assert pipeline.config.chunking.respect == "page"
    answer = pipeline.ask("أين تقع مدينة القاهرة؟")
    chunks = {c.id: c for c in chunk_corpus(corpus, pipeline.config.chunking)}
    assert chunks[answer.hits[0].id].citation == "report.pdf, page 2"
    assert answer.citations[0] == "report.pdf, page 2"


def test_an_unusable_cache_costs_speed_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "news.html").write_text(HTML, encoding="utf-8")
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the cache folder would go", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="composer"):
        corpus = load_corpus(tmp_path / "news.html", cache_dir=blocked / "cache")
    assert [d.title for d in corpus] == ["أخبار المكتبة"]
    assert "document cache unavailable" in caplog.text


def test_the_cache_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from composer.files import default_cache_dir

    monkeypatch.delenv("COMPOSER_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / ".cache" / "composer"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "composer"
    monkeypatch.setenv("COMPOSER_CACHE_DIR", str(tmp_path / "mine"))
    assert default_cache_dir() == tmp_path / "mine"
