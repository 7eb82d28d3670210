"""Loading question sets, corpora and runs from every supported source."""

from __future__ import annotations

import csv
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from composer.data import (
    Corpus,
    Document,
    Hit,
    Question,
    load_corpus,
    load_questions,
    load_ranking_file,
    unknown_relevant_ids,
)
from composer.data.readers import read_records

QUESTIONS: list[dict[str, Any]] = [
    {
        "id": "q1",
        "question": "ما هي عاصمة مصر؟",
        "relevant_ids": ["d1", "d2"],
        "reference_answer": "القاهرة",
        "answers": ["القاهرة", "مدينة القاهرة"],
        "context": ["القاهرة عاصمة مصر; وأكبر مدنها"],
        "source": "wiki",
    },
    {"id": "q2", "question": "پایتخت ایران کجاست؟", "relevant_ids": ["d3"], "reference_answer": "تهران"},
]

EXPECTED = [
    Question(
        id="q1",
        question="ما هي عاصمة مصر؟",
        relevant_ids=("d1", "d2"),
        reference_answer="القاهرة",
        answers=("القاهرة", "مدينة القاهرة"),
        context=("القاهرة عاصمة مصر; وأكبر مدنها",),
        metadata={"source": "wiki"},
    ),
    Question(id="q2", question="پایتخت ایران کجاست؟", relevant_ids=("d3",), reference_answer="تهران"),
]


def _table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows as a flat table: list cells as JSON arrays, as a user's spreadsheet would hold them."""
    flat = [
        {k: json.dumps(v, ensure_ascii=False) if isinstance(v, list) else v for k, v in row.items()}
        for row in rows
    ]
    return pd.DataFrame(flat)


def _write(rows: list[dict[str, Any]], path: Path) -> Path:
    """Write rows in the format the extension names."""
    suffix = path.suffix
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    elif suffix == ".json":
        path.write_text(json.dumps(rows, ensure_ascii=False, indent=2), encoding="utf-8")
    elif suffix in (".csv", ".tsv"):
        _table(rows).to_csv(path, index=False, sep="\t" if suffix == ".tsv" else ",")
    elif suffix == ".xlsx":
        _table(rows).to_excel(path, index=False)
    elif suffix == ".parquet":
        pd.DataFrame(rows).to_parquet(path)
    else:
        raise AssertionError(suffix)
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".tsv", ".xlsx", ".parquet"])
def test_questions_from_every_file_format(tmp_path: Path, suffix: str) -> None:
    path = _write(QUESTIONS, tmp_path / f"questions{suffix}")
    qs = load_questions(path)
    assert qs.questions == EXPECTED
    assert qs.source == str(path)


def test_questions_from_dataframe_and_list() -> None:
    assert load_questions(pd.DataFrame(QUESTIONS)).questions == EXPECTED
    assert load_questions(_table(QUESTIONS)).questions == EXPECTED
    from_list = load_questions(QUESTIONS)
    assert from_list.questions == EXPECTED
    assert from_list.source == "<list>"


def test_equal_sets_share_a_fingerprint_across_formats(tmp_path: Path) -> None:
    fingerprints = {
        load_questions(_write(QUESTIONS, tmp_path / f"q{s}")).fingerprint()
        for s in (".jsonl", ".csv", ".xlsx")
    }
    assert len(fingerprints) == 1


def test_aliases_from_other_tools_map_to_fields() -> None:
    rows = [
        {"qid": 7, "query": "a?", "relevant": "d1", "answer": "x", "contexts": ["c1", "c2"]},
        {"ID": "b", "Question": "b?", "ground_truth": "y", "ground_truths": ["y", "z"]},
        {"question_id": "c", "user_input": "c?", "reference": "r", "reference_contexts": "ctx"},
    ]
    a, b, c = load_questions(rows)
    assert a == Question(
        id="7", question="a?", relevant_ids=("d1",), reference_answer="x", context=("c1", "c2")
    )
    assert b == Question(id="b", question="b?", reference_answer="y", answers=("y", "z"))
    assert b.gold_answers == ("y", "z")
    assert c == Question(id="c", question="c?", reference_answer="r", context=("ctx",))


def test_scalars_become_one_element_lists_and_duplicates_go() -> None:
    (q,) = load_questions([{"question": "q?", "relevant_ids": 12, "answers": "a", "context": "c"}])
    assert (q.relevant_ids, q.answers, q.context) == (("12",), ("a",), ("c",))
    (q,) = load_questions([{"question": "q?", "relevant_ids": ["d1", "d1", "d2"]}])
    assert q.relevant_ids == ("d1", "d2")


def test_json_records_never_split_strings() -> None:
    (q,) = load_questions([{"question": "q?", "relevant_ids": "a|b", "answers": "[1]"}])
    assert q.relevant_ids == ("a|b",)
    assert q.answers == ("[1]",)


def test_csv_list_cell_convention(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["question", "relevant_ids", "answers", "context"])
        writer.writerow(["q1?", "d1|d2", "a|b", "one; passage | with separators"])
        writer.writerow(["q2?", "d1; d3 ;", '["x", "y"]', '["c1", "c2"]'])
        writer.writerow(["q3?", '["d|4"]', "", ""])
    q1, q2, q3 = load_questions(path)
    assert q1.relevant_ids == ("d1", "d2")
    assert q1.answers == ("a|b",)  # free text is never split
    assert q1.context == ("one; passage | with separators",)
    assert (q2.relevant_ids, q2.answers, q2.context) == (("d1", "d3"), ("x", "y"), ("c1", "c2"))
    assert (q3.relevant_ids, q3.answers, q3.context, q3.reference_answer) == (("d|4",), (), (), None)


def test_semicolon_separated_csv_and_bom(tmp_path: Path) -> None:
    path = tmp_path / "excel.csv"
    path.write_bytes("\ufeffid;question;relevant_ids\nq1;سؤال؟;d1|d2\n".encode())
    (q,) = load_questions(path)
    assert (q.id, q.question, q.relevant_ids) == ("q1", "سؤال؟", ("d1", "d2"))


def test_squad_style_answers() -> None:
    row = {
        "id": "s",
        "question": "q?",
        "answers": {"text": ["a", "b"], "answer_start": [0, 9]},
        "context": "p",
    }
    (q,) = load_questions([row])
    assert q.answers == ("a", "b")
    assert q.context == ("p",)


def test_missing_values_are_missing() -> None:
    frame = pd.DataFrame(
        [
            {"id": 1.0, "question": " q1? ", "reference_answer": 1958.0, "tag": "x"},
            {"id": float("nan"), "question": "q2?", "reference_answer": float("nan"), "tag": None},
        ]
    )
    q1, q2 = load_questions(frame)
    assert (q1.id, q1.question, q1.reference_answer, q1.metadata) == ("1", "q1?", "1958", {"tag": "x"})
    assert q2.reference_answer is None
    assert q2.metadata == {}
    assert q2.id.startswith("q-")
    (q,) = load_questions([{"question": "q?", "reference_answer": "", "answers": ["", "a"]}])
    assert (q.reference_answer, q.answers) == (None, ("a",))


def test_generated_ids_are_deterministic_and_independent_of_other_rows() -> None:
    rows = [{"question": "ما هي عاصمة مصر؟"}, {"question": "other?"}, {"question": "ما هي عاصمة مصر؟"}]
    ids = [q.id for q in load_questions(rows)]
    digest = hashlib.sha1("ما هي عاصمة مصر؟".encode()).hexdigest()[:12]
    assert ids == [f"q-{digest}", f"q-{hashlib.sha1(b'other?').hexdigest()[:12]}", f"q-{digest}-2"]
    assert [q.id for q in load_questions(rows)] == ids
    shifted = [q.id for q in load_questions([{"question": "new?"}, *rows])]
    assert shifted[1:] == ids


def test_metadata_merges_extra_columns(tmp_path: Path) -> None:
    (q,) = load_questions([{"question": "q?", "topic": "geo", "metadata": {"split": "test"}}])
    assert q.metadata == {"topic": "geo", "split": "test"}
    path = tmp_path / "q.csv"
    path.write_text('question,metadata,level\nq?,"{""split"": ""dev""}",3\n', encoding="utf-8")
    (q,) = load_questions(path)
    assert q.metadata == {"level": "3", "split": "dev"}


def test_record_numbers_point_into_the_file(tmp_path: Path) -> None:
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text('{"a": 1}\n\n{"a": 2}\n', encoding="utf-8")
    assert [n for n, _ in read_records(jsonl).rows] == [1, 3]
    array = _write([{"a": 1}, {"a": 2}, {"a": 3}], tmp_path / "a.json")
    assert [n for n, _ in read_records(array).rows] == [2, 5, 8]
    assert read_records(array).unit == "line"
    table = tmp_path / "a.csv"
    table.write_text('a,b\n1,"two\nlines"\n\n3,x\n', encoding="utf-8")
    records = read_records(table)
    assert list(records.rows) == [(2, {"a": "1", "b": "two\nlines"}), (5, {"a": "3", "b": "x"})]
    sheet = _write([{"a": 1}, {"a": 2}], tmp_path / "a.xlsx")
    assert [n for n, _ in read_records(sheet).rows] == [2, 3]
    assert read_records(sheet).unit == "row"


def test_spreadsheet_header_below_blank_rows(tmp_path: Path) -> None:
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.append([])
    sheet.append(["ID", "Question", "Relevant_IDs"])
    sheet.append([101, "q?", "d1;d2"])
    book.save(tmp_path / "q.xlsx")
    assert list(read_records(tmp_path / "q.xlsx").rows) == [
        (3, {"ID": 101, "Question": "q?", "Relevant_IDs": "d1;d2"})
    ]
    (q,) = load_questions(tmp_path / "q.xlsx")
    assert (q.id, q.question, q.relevant_ids) == ("101", "q?", ("d1", "d2"))


def test_csv_cells_may_hold_long_documents(tmp_path: Path) -> None:
    text = "نص طويل. " * 40_000  # 360k characters, beyond the csv module's default field limit
    pd.DataFrame([{"id": "long", "text": text}]).to_csv(tmp_path / "c.csv", index=False)
    assert load_corpus(tmp_path / "c.csv").documents == [Document("long", text)]


def test_relevant_ids_checked_against_corpus(caplog: pytest.LogCaptureFixture) -> None:
    corpus = Corpus([Document("d1", "t1"), Document("d2", "t2")])
    rows = [{"question": "a?", "relevant_ids": ["d1", "d2#3"]}, {"question": "b?", "relevant_ids": ["d2"]}]
    with caplog.at_level(logging.WARNING, logger="composer"):
        assert len(load_questions(rows, corpus=corpus, strict=True)) == 2
    assert not caplog.records
    questions = load_questions([*rows, {"question": "c?", "relevant_ids": ["d9", "d2#x"]}])
    assert unknown_relevant_ids(questions, corpus) == ["d9", "d2#x"]


# -- corpora -------------------------------------------------------------------------------------------

DOCS: list[dict[str, Any]] = [
    {"id": "d1", "title": "مصر", "text": "القاهرة عاصمة مصر.\n", "lang": "ar"},
    {"id": "d2", "title": "ایران", "text": "تهران پایتخت ایران است.", "lang": "fa"},
]
EXPECTED_DOCS = [
    Document("d1", "القاهرة عاصمة مصر.\n", "مصر", {"lang": "ar"}),
    Document("d2", "تهران پایتخت ایران است.", "ایران", {"lang": "fa"}),
]


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".xlsx", ".parquet"])
def test_corpus_from_every_file_format(tmp_path: Path, suffix: str) -> None:
    corpus = load_corpus(_write(DOCS, tmp_path / f"corpus{suffix}"))
    assert corpus.documents == EXPECTED_DOCS
    assert "d2" in corpus
    assert corpus.get("d1") == EXPECTED_DOCS[0]


def test_corpus_from_memory_with_aliases_and_generated_ids() -> None:
    assert load_corpus(pd.DataFrame(DOCS)).documents == EXPECTED_DOCS
    corpus = load_corpus(
        [
            {"_id": "b1", "contents": "beir text", "metadata": {"url": "u"}},
            {"text": "no id here"},
            {"text": "no id here"},
        ]
    )
    digest = hashlib.sha1(b"no id here").hexdigest()[:12]
    assert [d.id for d in corpus] == ["b1", f"d-{digest}", f"d-{digest}-2"]
    assert corpus.documents[0] == Document("b1", "beir text", "", {"url": "u"})
    assert load_corpus([{"text": "no id here"}]).documents[0].id == f"d-{digest}"


def test_corpus_from_a_folder(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "guides" / "deep").mkdir(parents=True)
    (tmp_path / ".git").mkdir()
    (tmp_path / "b.txt").write_text("second\n", encoding="utf-8")
    (tmp_path / "a.md").write_text("# عنوان\nنص", encoding="utf-8")
    (tmp_path / "guides" / "setup.MD").write_text("setup", encoding="utf-8")
    (tmp_path / "guides" / "deep" / "x.txt").write_text("deep", encoding="utf-8")
    (tmp_path / "guides" / "empty.txt").write_text("  \n", encoding="utf-8")
    (tmp_path / "notes.rst").write_text("ignored", encoding="utf-8")
    (tmp_path / ".git" / "HEAD.txt").write_text("hidden", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="composer"):
        corpus = load_corpus(tmp_path)
    assert [d.id for d in corpus] == ["a.md", "b.txt", "guides/deep/x.txt", "guides/setup.MD"]
    # A Markdown file's title is its first heading (issue 18.8), its headings go in the metadata.
    assert corpus.documents[0] == Document("a.md", "# عنوان\nنص", "عنوان", {"headings": [[0, "عنوان"]]})
    assert corpus.get("b.txt") == Document("b.txt", "second\n", "b")
    assert corpus.source == str(tmp_path)
    assert "guides/empty.txt: skipped: empty file" in caplog.text
    assert load_corpus(str(tmp_path)).fingerprint() == corpus.fingerprint()


# -- runs ----------------------------------------------------------------------------------------------


def test_jsonl_run_keeps_file_order(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    lines = [
        {"id": "q1", "results": [{"id": "d2", "score": 0.5}, {"id": "d1", "score": 0.9, "text": "t"}]},
        {"id": 2, "results": [{"id": "d1#0", "score": 3, "doc_id": "d1"}]},
        {"id": "q3", "results": []},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines), encoding="utf-8")
    run = load_ranking_file(path)
    assert run == {
        "q1": [Hit("d2", 0.5), Hit("d1", 0.9, "t")],
        "2": [Hit("d1#0", 3.0, None, "d1")],
        "q3": [],
    }
    array = tmp_path / "run.json"
    array.write_text(json.dumps(lines, indent=1), encoding="utf-8")
    assert load_ranking_file(array) == run


@pytest.mark.parametrize("name", ["run.trec", "run.txt", "run.run", "run"])
def test_trec_run(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text("q1 Q0 d3 1 2.5 bm25\nq2 Q0 d1 1 7 bm25\n\nq1  Q0\td1 2 -1.5e-1 bm25\n", encoding="utf-8")
    assert load_ranking_file(path) == {"q1": [Hit("d3", 2.5), Hit("d1", -0.15)], "q2": [Hit("d1", 7.0)]}


def test_run_format_can_be_forced(tmp_path: Path) -> None:
    path = tmp_path / "run.txt"
    path.write_text('{"id": "q1", "results": [{"id": "d1", "score": 1}]}\n', encoding="utf-8")
    assert load_ranking_file(path, fmt="jsonl") == {"q1": [Hit("d1", 1.0)]}


# -- the shared datasets -------------------------------------------------------------------------------


def test_arcd_loads_with_every_label_in_the_corpus(arcd_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    corpus = load_corpus(arcd_dir / "corpus.jsonl")
    with caplog.at_level(logging.WARNING, logger="composer"):
        questions = load_questions(arcd_dir / "questions.jsonl", corpus=corpus, strict=True)
    assert (len(corpus), len(questions)) == (460, 1395)
    assert not caplog.records
    first = questions.questions[0]
    assert first == Question(
        id="969331847966",
        question="- من هو جمال أحمد حمزة خاشقجي؟",
        relevant_ids=("arcd-000-0",),
        reference_answer="صحفي وإعلامي",
        answers=("صحفي وإعلامي",),
    )
    assert corpus.get("arcd-000-0") is not None
    assert all(q.relevant_ids and q.reference_answer for q in questions)


def test_persianqa_loads(persianqa_dir: Path) -> None:
    corpus = load_corpus(persianqa_dir / "corpus.jsonl")
    questions = load_questions(persianqa_dir / "questions.jsonl", corpus=corpus, strict=True)
    unanswerable = load_questions(persianqa_dir / "questions_unanswerable.jsonl", corpus=corpus, strict=True)
    assert (len(corpus), len(questions), len(unanswerable)) == (93, 651, 279)
    assert all(q.gold_answers for q in questions)
    assert all(q.reference_answer is None and not q.answers for q in unanswerable)
    assert not {q.id for q in questions} & {q.id for q in unanswerable}
