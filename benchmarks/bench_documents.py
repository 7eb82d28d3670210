"""PDF extractors on Arabic and Persian: pypdf (what ``composer.data.documents`` uses) against pdfminer.six,
per page time and character similarity to the known text, as extracted and after
``composer.data.documents.repair``.

The PDFs are the test suite's (tests/data/test_documents.py): three pages of known Arabic or Persian text
repeated ``--repeat`` times, stored as typed, as presentation forms, and drawn right to left with and
without presentation forms, with a running header and a page-number footer. pdfminer.six is not a
dependency: install it to compare (``pip install pdfminer.six``).

    .venv/bin/python benchmarks/bench_documents.py [--repeat 10]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, help="copies of the three pages in each PDF")
    args = parser.parse_args()
    import test_documents as t
    from pypdf import PdfReader

    from composer.data.documents.repair import repair_pages

    try:
        from pdfminer.high_level import extract_text
    except ImportError:
        extract_text = None
    print("lang  stored as       pypdf ms/page  raw  repaired | pdfminer ms/page  raw  repaired")
    with tempfile.TemporaryDirectory() as tmp:
        for lang, known in (("ar", t.ARABIC_PAGES), ("fa", t.PERSIAN_PAGES)):
            pages = known * args.repeat
            expected = "\n\n".join(" ".join(p) for p in pages)
            for order, store in t.ORDERS.items():
                path = Path(tmp) / f"{lang}-{order}.pdf"
                t._write_pdf(path, pages, store, t.HEADER[lang], t.FOOTER[lang])
                row = f"{lang:4s}  {order:15s}"
                extractors = [("pypdf", lambda p: [x.extract_text() for x in PdfReader(p).pages])]
                if extract_text is not None:
                    extractors.append(("pdfminer", lambda p: extract_text(p).rstrip("\f").split("\f")))
                for _, extract in extractors:
                    start = time.perf_counter()
                    raw = extract(path)
                    ms = 1000 * (time.perf_counter() - start) / len(pages)
                    repaired = "\n\n".join(repair_pages(raw, Counter()))
                    before, after = t._similarity("\n".join(raw), expected), t._similarity(repaired, expected)
                    row += f"  {ms:12.1f}  {before:.3f}  {after:.3f}   |"
                print(row.rstrip(" |"))


if __name__ == "__main__":
    main()
