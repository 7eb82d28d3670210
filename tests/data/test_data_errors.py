"""Every bad input names its file, line (or row) and field, in one readable message."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from composer.data import Corpus, Document, load_corpus, load_questions, load_ranking_file
from composer.errors import InputError


def _error(call: Any, *args: Any, **kwargs: Any) -> InputError:
    with pytest.raises(InputError) as info:
        call(*args, **kwargs)
    return info.value


def _located(error: InputError, path: Path | str, line: int | None, field: str | None = None) -> str:
    """Assert the error's location and return its message text."""
    assert (error.path, error.line, error.field) == (str(path), line, field)
    prefix = str(path) + (f":{line}" if line is not None else "")
    assert str(error).startswith(prefix + (f" (field '{field}')" if field else "") + ": ")
    return error.message


def _jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


# -- malformed JSON ------------------------------------------------------------------------------------


def test_malformed_jsonl_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text('{"question": "a?"}\n\n{"question": "b?",}\n', encoding="utf-8")
    message = _located(_error(load_questions, path), path, 3)
    assert message.startswith("invalid JSON: Expecting property name enclosed in double quotes (column 19)")


def test_malformed_json_array_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    path.write_text('[\n  {"question": "a?"},\n  {"question": "b?"\n   "id": "x"}\n]', encoding="utf-8")
    assert "Expecting ',' delimiter" in _located(_error(load_questions, path), path, 4)
    path.write_text('[{"question": "a?"}\n {"question": "b?"}]', encoding="utf-8")
    assert "expected ',' or ']'" in _located(_error(load_questions, path), path, 2)
    path.write_text('[{"question": "a?"}]\n[]', encoding="utf-8")
    assert "extra data after the array" in _located(_error(load_questions, path), path, 2)


def test_pretty_printed_object_is_explained(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    path.write_text(json.dumps({"questions": [{"question": "a?"}]}, indent=2), encoding="utf-8")
    message = _located(_error(load_questions, path), path, 1)
    assert message == (
        "expected JSON Lines (one object per line) or a JSON array of objects, "
        "got an object spread over several lines"
    )


def test_non_object_row(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "q.jsonl", [{"question": "a?"}, ["b?"]])
    assert _located(_error(load_questions, path), path, 2) == "expected a JSON object, got an array"
    assert "expected a dict, got str" in str(_error(load_questions, ["a?"]))


# -- missing question text -----------------------------------------------------------------------------


def test_missing_question_text_in_jsonl(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "q.jsonl", [{"question": "a?"}, {"id": "x", "relevant_ids": ["d1"]}])
    assert _located(_error(load_questions, path), path, 2, "question") == "missing question text"
    path = _jsonl(tmp_path / "q.jsonl", [{"question": "  \n"}])
    assert _located(_error(load_questions, path), path, 1, "question") == "missing question text"


def test_missing_question_text_in_tables(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    path.write_text('id,question\n1,"multi\nline?"\n2,\n', encoding="utf-8")
    _located(_error(load_questions, path), path, 4, "question")
    sheet = tmp_path / "q.xlsx"
    pd.DataFrame({"id": ["a", "b", "c"], "question": ["a?", "b?", None]}).to_excel(sheet, index=False)
    _located(_error(load_questions, sheet), sheet, 4, "question")
    frame = pd.DataFrame({"question": ["a?", float("nan")]})
    _located(_error(load_questions, frame), "<DataFrame>", 2, "question")
    _located(_error(load_questions, [{"question": "a?"}, {"question": ""}]), "<list>", 2, "question")


def test_missing_document_text(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "c.jsonl", [{"id": "d1", "text": "t"}, {"id": "d2", "title": "only a title"}])
    assert _located(_error(load_corpus, path), path, 2, "text") == "missing document text"


def test_wrong_types_name_the_field(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "q.jsonl", [{"question": {"text": "a?"}}])
    assert _located(_error(load_questions, path), path, 1, "question") == "expected one text, got an object"
    path = _jsonl(tmp_path / "q.jsonl", [{"question": "a?", "relevant_ids": [["d1"]]}])
    _located(_error(load_questions, path), path, 1, "relevant_ids")
    path = _jsonl(tmp_path / "q.jsonl", [{"question": "a?", "metadata": "x"}])
    assert _located(_error(load_questions, path), path, 1, "metadata") == "expected an object, got str"


def test_bad_json_array_cell(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    path.write_text('question,relevant_ids\na?,d1\nb?,"[""d1"", "\n', encoding="utf-8")
    assert "invalid JSON array" in _located(_error(load_questions, path), path, 3, "relevant_ids")


def test_two_names_for_one_field(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "q.jsonl", [{"question": "a?", "answer": "x", "reference_answer": "y"}])
    message = _located(_error(load_questions, path), path, 1, "reference_answer")
    assert message == "both 'answer' and 'reference_answer' given; keep one"


# -- duplicate ids -------------------------------------------------------------------------------------


def test_duplicate_question_ids_name_both_lines(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "q.jsonl", [{"id": "q1", "question": "a?"}, {"id": 2, "question": "b?"}, {}])
    path.write_text(path.read_text(encoding="utf-8").replace("{}", '{"id": "2", "question": "c?"}'))
    message = _located(_error(load_questions, path), path, 3, "id")
    assert message == "duplicate question id '2' (lines 2 and 3)"


def test_duplicate_ids_in_tables_and_corpora(tmp_path: Path) -> None:
    sheet = tmp_path / "q.xlsx"
    pd.DataFrame({"id": [1, 2, 1], "question": ["a?", "b?", "c?"]}).to_excel(sheet, index=False)
    assert (
        _located(_error(load_questions, sheet), sheet, 4, "id") == "duplicate question id '1' (rows 2 and 4)"
    )
    path = _jsonl(tmp_path / "c.jsonl", [{"id": "d1", "text": "x"}, {"id": "d1", "text": "y"}])
    assert _located(_error(load_corpus, path), path, 2, "id") == "duplicate document id 'd1' (lines 1 and 2)"


def test_duplicate_ids_on_one_line_of_a_json_array(tmp_path: Path) -> None:
    """Found by the property tests: both objects start on line 1, which once hid the duplicate."""
    path = tmp_path / "c.json"
    path.write_text(json.dumps([{"id": "d1", "text": "x"}, {"id": "d1", "text": "y"}]), encoding="utf-8")
    message = _located(_error(load_corpus, path), path, 1, "id")
    assert message == "duplicate document id 'd1' (twice on line 1)"


def test_json_lines_end_at_newlines_only(tmp_path: Path) -> None:
    """json.dumps(..., ensure_ascii=False) leaves U+2028 and U+0085 raw inside strings: still one line."""
    path = tmp_path / "q.jsonl"
    rows = [{"question": "a\u2028b?"}, {"question": "c\x85d?"}, {"question": "e?"}]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\r\n" for r in rows), encoding="utf-8")
    assert [q.question for q in load_questions(path)] == ["a\u2028b?", "c\x85d?", "e?"]
    path.write_text(path.read_text(encoding="utf-8") + "{oops\n", encoding="utf-8")
    _located(_error(load_questions, path), path, 4)


# -- relevant ids absent from the corpus ---------------------------------------------------------------

CORPUS = Corpus([Document("d1", "one"), Document("d2", "two")], source="corpus.jsonl")


def test_unknown_relevant_ids_warn_with_the_count(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rows = [
        {"id": "a", "question": "a?", "relevant_ids": ["d1", "x1"]},
        {"id": "b", "question": "b?", "relevant_ids": ["d2#0", "x2", "x1"]},
    ]
    path = _jsonl(tmp_path / "q.jsonl", rows)
    with caplog.at_level(logging.WARNING, logger="composer"):
        questions = load_questions(path, corpus=CORPUS)
    assert len(questions) == 2
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: 2 of 4 relevant ids are not in the corpus corpus.jsonl (e.g. x1, x2)"
    ]
    assert caplog.records[0].name == "composer.data.questions"


def test_unknown_relevant_ids_are_an_error_when_strict(tmp_path: Path) -> None:
    rows = [{"question": "a?", "relevant_ids": ["d1"]}, {"question": "b?", "relevant_ids": "d9"}]
    path = _jsonl(tmp_path / "q.jsonl", rows)
    message = _located(_error(load_questions, path, corpus=CORPUS, strict=True), path, 2, "relevant_ids")
    assert message == "1 of 2 relevant ids are not in the corpus corpus.jsonl (e.g. d9)"


# -- undecodable bytes ---------------------------------------------------------------------------------


def test_undecodable_bytes_give_line_and_byte_offset(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    path.write_bytes(b'{"question": "a?"}\n{"question": "\xd9\x85\xff?"}\n')
    message = _located(_error(load_questions, path), path, 2)
    assert message == "not valid UTF-8: byte(s) ff at byte offset 35; save the file as UTF-8"


def test_undecodable_bytes_in_every_text_source(tmp_path: Path) -> None:
    latin1 = "id,question\n1,caf\xe9?\n".encode("latin-1")
    (tmp_path / "q.csv").write_bytes(latin1)
    assert "byte offset 17" in _located(_error(load_questions, tmp_path / "q.csv"), tmp_path / "q.csv", 2)
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "ok.txt").write_text("fine", encoding="utf-8")
    (folder / "bad.md").write_bytes(b"line one\nline two \x80\n")
    _located(_error(load_corpus, folder), folder / "bad.md", 2)
    (tmp_path / "run.trec").write_bytes(b"q1 Q0 d\xe9 1 1.0 x\n")
    _located(_error(load_ranking_file, tmp_path / "run.trec"), tmp_path / "run.trec", 1)


# -- invalid text: lone surrogates ----------------------------------------------------------------------

SURROGATE = "invalid text (lone surrogate U+D800 at character 4)"


@pytest.mark.parametrize(
    ("loader", "row", "field", "message"),
    [
        (load_questions, {"id": "q2", "question": "who\ud800?"}, "question", SURROGATE),
        (load_questions, {"id": "q2", "query": "who\ud800?"}, "query", SURROGATE),  # as the user named it
        (load_questions, {"id": "q2\udfff", "question": "b?"}, "id", "lone surrogate U+DFFF at character 3"),
        (load_questions, {"question": "b?", "relevant_ids": ["d1", "d\ud800"]}, "relevant_ids[1]",
         "U+D800 at character 2"),
        (load_questions, {"question": "b?", "answers": ["ok", "abc\ud800"]}, "answers[1]", SURROGATE),
        (load_questions, {"question": "b?", "metadata": {"src": ["x", "abc\ud800"]}}, "metadata.src[1]",
         SURROGATE),
        (load_questions, {"question": "b?", "note": "abc\ud800"}, "note", SURROGATE),
        (load_questions, {"question": "b?", "k\ud800": 1}, "k\\ud800", "invalid field name"),
        (load_corpus, {"id": "d2", "text": "abc\ud800 text"}, "text", SURROGATE),
        (load_corpus, {"id": "d2", "title": "abc\ud800", "text": "text"}, "title", SURROGATE),
    ],
)
def test_a_lone_surrogate_is_refused_at_load_naming_file_line_and_field(
    tmp_path: Path, loader: Any, row: dict[str, Any], field: str, message: str
) -> None:
    """A JSON escape such as "\\ud800" decodes to half a UTF-16 pair, which no UTF-8 file can hold: it must
    stop the load where it is, not at the first fingerprint (a UnicodeEncodeError with no file named)."""
    good = {"id": "d1", "text": "first"} if loader is load_corpus else {"id": "q1", "question": "a?"}
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n", encoding="utf-8")  # ASCII escapes
    error = _located(_error(loader, path), path, 2, field)
    assert message in error
    str(_error(loader, path)).encode("utf-8")  # the message itself prints anywhere


def test_a_lone_surrogate_from_memory_a_json_array_or_a_run_is_refused(tmp_path: Path) -> None:
    rows = [{"question": "a?"}, {"question": "b\ud800"}]
    _located(_error(load_questions, rows), "<list>", 2, "question")
    frame = pd.DataFrame(rows, dtype=object)  # pandas' own Arrow strings refuse surrogates already
    _located(_error(load_questions, frame), "<DataFrame>", 2, "question")
    path = tmp_path / "q.json"
    path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    _located(_error(load_questions, path), path, 5, "question")
    run = tmp_path / "run.jsonl"
    run.write_text(json.dumps({"id": "q1", "results": [{"id": "d1", "score": 1.0, "text": "x\udc80"}]}))
    assert "U+DC80 at character 2" in _located(_error(load_ranking_file, run), run, 1, "results[0].text")


def test_valid_astral_characters_and_escaped_pairs_load(tmp_path: Path) -> None:
    """A surrogate *pair* escape is one valid character; emoji and RTL marks are text like any other."""
    path = tmp_path / "q.jsonl"
    path.write_text('{"question": "\\ud83d\\ude00 \u200f\u0645\u0631\u062d\u0628\u0627\u200c?"}\n',
                    encoding="utf-8")
    (question,) = load_questions(path)
    assert question.question.startswith("\U0001f600")
    load_questions(path).fingerprint()


# -- empty files ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["q.jsonl", "q.json", "q.csv", "q.xlsx", "q.parquet"])
def test_empty_file(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"")
    assert _located(_error(load_questions, path), path, None) == "file is empty"
    assert _located(_error(load_corpus, path), path, None) == "file is empty"


def test_files_without_records(tmp_path: Path) -> None:
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n  \n", encoding="utf-8")
    assert _located(_error(load_questions, blank), blank, None) == "file is empty"
    header_only = tmp_path / "h.csv"
    header_only.write_text("id,question\n\n", encoding="utf-8")
    assert _located(_error(load_questions, header_only), header_only, None) == "no records found"
    array = tmp_path / "a.json"
    array.write_text(" [ ] ", encoding="utf-8")
    assert _located(_error(load_corpus, array), array, None) == "no records found"
    assert _located(_error(load_questions, []), "<list>", None) == "no records found"
    assert (
        _located(_error(load_corpus, pd.DataFrame({"text": []})), "<DataFrame>", None) == "no records found"
    )
    run = tmp_path / "run.trec"
    run.write_text("\n", encoding="utf-8")
    assert _located(_error(load_ranking_file, run), run, None) == "file is empty"
    run.write_text("[]", encoding="utf-8")
    assert _located(_error(load_ranking_file, run), run, None) == "no records found"


def test_empty_folder_corpus(tmp_path: Path) -> None:
    (tmp_path / "readme.rst").write_text("not a document", encoding="utf-8")
    assert _located(_error(load_corpus, tmp_path), tmp_path, None) == (
        "no .md, .markdown, .txt, .pdf, .docx, .pptx, .html, .htm files in this folder"
    )
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    _located(_error(load_corpus, tmp_path), tmp_path, None)


# -- unknown extension and other unreadable paths ------------------------------------------------------


@pytest.mark.parametrize("name", ["questions.txt", "questions", "questions.xls"])
def test_unknown_extension_lists_supported_ones(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text('{"question": "a?"}\n', encoding="utf-8")
    message = _located(_error(load_questions, path), path, None)
    suffix = path.suffix or "(none)"
    assert (
        message
        == f"unsupported file type '{suffix}'; supported: .jsonl, .ndjson, .json, .csv, .tsv, .xlsx, .parquet"
    )


def test_missing_file_and_wrong_source_type(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    assert _located(_error(load_questions, missing), missing, None) == "file not found"
    assert _located(_error(load_ranking_file, missing), missing, None) == "file not found"
    assert (
        _located(_error(load_questions, tmp_path / "dir.csv"), tmp_path / "dir.csv", None) == "file not found"
    )
    (tmp_path / "folder").mkdir()
    message = _located(_error(load_questions, tmp_path / "folder"), tmp_path / "folder", None)
    assert message == "expected a file, got a directory"
    message = str(_error(load_questions, 42))
    assert message == "expected a file path, a pandas DataFrame or a list of dicts, got int"


def test_damaged_binary_files(tmp_path: Path) -> None:
    for name in ("q.xlsx", "q.parquet"):
        path = tmp_path / name
        path.write_bytes(b"not really a binary table")
        message = _located(_error(load_questions, path), path, None)
        assert message.startswith(f"cannot read {'XLSX' if name.endswith('xlsx') else 'Parquet'}: ")


def test_bad_csv_shape(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    path.write_text("id,question\n1,a?,extra\n", encoding="utf-8")
    assert _located(_error(load_questions, path), path, 2) == "3 cells but the header has 2 columns"
    path.write_text("id,question,id\n1,a?,2\n", encoding="utf-8")
    assert _located(_error(load_questions, path), path, 1) == "duplicate column 'id' in the header"


# -- runs ----------------------------------------------------------------------------------------------


def test_bad_trec_lines(tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    path.write_text("q1 Q0 d1 1 1.5 tag\nq1 d2 2 1.0 tag\n", encoding="utf-8")
    message = _located(_error(load_ranking_file, path), path, 2)
    assert message == "expected 6 whitespace-separated fields 'qid Q0 docid rank score tag', got 5"
    path.write_text("q1 Q0 d1 1 1.5 tag\n\nq1 Q0 d2 2 high tag\n", encoding="utf-8")
    message = _located(_error(load_ranking_file, path), path, 3, "score")
    assert message == "score must be a finite number, got 'high'"
    path.write_text("q1 Q0 d1 1 nan tag\n", encoding="utf-8")
    _located(_error(load_ranking_file, path), path, 1, "score")
    path.write_text("q1 Q0 d1 first 1.0 tag\n", encoding="utf-8")
    message = _located(_error(load_ranking_file, path), path, 1, "rank")
    assert message == "rank must be an integer, got 'first'"


def test_bad_jsonl_runs(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    ok = {"id": "q1", "results": [{"id": "d1", "score": 1.0}]}
    cases: list[tuple[Any, str | None, str]] = [
        (
            {"id": "q2", "results": [{"id": "d1", "score": 1}, {"id": "d2"}]},
            "results[1].score",
            "finite number",
        ),
        ({"id": "q2", "results": [{"id": "d1", "score": "0.5"}]}, "results[0].score", "got '0.5'"),
        ({"id": "q2", "results": [{"score": 0.5}]}, "results[0].id", "missing id"),
        ({"id": "q2", "results": ["d1"]}, "results[0]", "expected an object"),
        ({"id": "q2", "results": {"d1": 1.0}}, "results", "expected a list of results"),
        ({"results": []}, "id", "missing question id"),
        ({"id": "q1", "results": []}, "id", "duplicate question id 'q1' (lines 1 and 2)"),
        ({"id": "q2", "results": [{"id": "d1", "score": 1, "text": 5}]}, "results[0].text", "text must be"),
    ]
    for bad, field, text in cases:
        _jsonl(path, [ok, bad])
        assert text in _located(_error(load_ranking_file, path), path, 2, field)
    path.write_text(json.dumps(ok) + "\n{oops\n", encoding="utf-8")
    assert "invalid JSON" in _located(_error(load_ranking_file, path), path, 2)
