"""Issue 26, input layer: links out of a document folder, FIFOs and broken links in it, input files that are
devices or FIFOs or hold an endless line, texts that show nothing, and ids in NFD against an NFC corpus."""

from __future__ import annotations

import json
import logging
import os
import resource
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import composer
from composer.cli.app import app
from composer.data import Corpus, load_corpus, load_questions, load_ranking_file
from composer.data import readers as readers_module
from composer.errors import InputError

SECRET = "the launch code is 0000"
NFC = unicodedata.normalize("NFC", "café-résumé")
NFD = unicodedata.normalize("NFD", NFC)


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _skips(corpus: Corpus) -> dict[str, tuple[str, str]]:
    assert corpus.tally is not None
    return {doc_id: (reason, message) for doc_id, reason, message in corpus.tally.skipped}


def _index(tmp_path: Path, corpus: Path, *options: str) -> Any:
    """``composer index`` on ``corpus`` (a BM25 pipeline, the document cache under tmp_path)."""
    config = tmp_path / "bm25.yaml"
    config.write_text("retrieval: {mode: bm25}\n", encoding="utf-8")
    args = ["index", str(corpus), "--config", str(config), "--workdir", str(tmp_path / "work"), *options]
    return CliRunner().invoke(app, args, env={"COMPOSER_CACHE_DIR": str(tmp_path / "cache")})


# -- 1. links out of a document folder ------------------------------------------------------------------


@pytest.fixture
def linked_folder(tmp_path: Path) -> Path:
    """A folder of one document, a link to it (inside: fine), and links out: to a file beside the folder,
    to /etc/passwd, and to a folder beside it."""
    (tmp_path / "outside-secret.txt").write_text(SECRET, encoding="utf-8")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "plans.md").write_text(SECRET, encoding="utf-8")
    root = tmp_path / "docs"
    root.mkdir()
    (root / "good.md").write_text("# Good\n\nA document of the folder.", encoding="utf-8")
    (root / "same.md").symlink_to("good.md")
    (root / "notes.md").symlink_to("../outside-secret.txt")
    (root / "passwd.txt").symlink_to("/etc/passwd")
    (root / "more").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    return root


def test_links_out_of_the_folder_are_skipped_with_a_warning_and_a_row(
    linked_folder: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="composer"):
        corpus = load_corpus(linked_folder, cache_dir=tmp_path / "cache")
    assert [d.id for d in corpus] == ["good.md", "same.md"]  # a link inside the folder is read
    assert not any(SECRET in d.text or "root:" in d.text for d in corpus)
    skips = _skips(corpus)
    assert set(skips) == {"more", "notes.md", "passwd.txt"}
    assert {reason for reason, _ in skips.values()} == {"outside the folder"}
    assert str(tmp_path / "outside-secret.txt") in skips["notes.md"][1]
    assert "--follow-links" in skips["notes.md"][1]
    for name in skips:
        assert sum(f"{name}: skipped: a link to" in r.getMessage() for r in caplog.records) == 1, name
    assert corpus.tally is not None and corpus.tally.lines()[0].endswith("3 skipped")
    with pytest.raises(InputError, match=r"3 file\(s\) skipped.*--strict"):
        load_corpus(linked_folder, strict=True, cache_dir=tmp_path / "cache")


def test_follow_links_reads_what_links_out_of_the_folder(linked_folder: Path, tmp_path: Path) -> None:
    (linked_folder / "passwd.txt").unlink()  # /etc/passwd is the machine's, not the test's
    corpus = load_corpus(linked_folder, cache_dir=tmp_path / "cache", follow_links=True)
    assert [d.id for d in corpus] == ["good.md", "more/plans.md", "notes.md", "same.md"]
    notes = corpus.get("notes.md")
    assert notes is not None and notes.text == SECRET
    assert _skips(corpus) == {}


def test_index_cli_skips_links_out_and_follows_them_on_request(linked_folder: Path, tmp_path: Path) -> None:
    (linked_folder / "passwd.txt").unlink()
    result = _index(tmp_path, linked_folder, "--report")
    assert result.exit_code == 0, result.output
    assert "2 skipped" in result.stdout and "notes.md: a link to" in result.stdout
    assert "2 documents" in result.stdout
    strict = _index(tmp_path, linked_folder, "--strict")
    assert strict.exit_code == 2 and "Traceback" not in strict.output
    followed = _index(tmp_path, linked_folder, "--follow-links", "--strict")
    assert followed.exit_code == 0, followed.output
    assert "4 documents" in followed.stdout


@pytest.mark.timeout(60)
def test_link_loops_end_and_are_reported(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "good.md").write_text("A document.", encoding="utf-8")
    (root / "sub" / "up").symlink_to("..", target_is_directory=True)  # a folder holding the link
    (root / "again").symlink_to(root, target_is_directory=True)
    (root / "self.md").symlink_to("self.md")  # a link to itself: ELOOP
    for follow in (False, True):
        corpus = load_corpus(root, cache_dir=tmp_path / "cache", follow_links=follow)
        assert [d.id for d in corpus] == ["good.md"]
        skips = _skips(corpus)
        assert {k: reason for k, (reason, _) in skips.items()} == {
            "again": "link loop", "self.md": "link loop", "sub/up": "link loop"
        }


def test_a_folder_reached_by_several_links_is_read_once(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "x.md").write_text("A document.", encoding="utf-8")
    (root / "l1").symlink_to("sub", target_is_directory=True)
    (root / "l2").symlink_to("sub", target_is_directory=True)
    corpus = load_corpus(root, cache_dir=tmp_path / "cache")
    assert [d.id for d in corpus] == ["sub/x.md"]  # the real folder keeps its ids
    skips = _skips(corpus)
    assert skips["l1"] == ("duplicate folder", f"{root / 'sub'}, already read as sub")
    assert set(skips) == {"l1", "l2"}


@pytest.mark.timeout(60)
def test_a_chain_of_folders_each_linking_twice_to_the_next_is_read_once(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    depth = 12  # 2**12 paths to the last folder when every path is walked
    for i in range(depth):
        (root / f"d{i}").mkdir(parents=True)
        (root / f"d{i}" / "f.md").write_text(f"Document {i}.", encoding="utf-8")
        if i:
            (root / f"d{i - 1}" / "a").symlink_to(f"../d{i}", target_is_directory=True)
            (root / f"d{i - 1}" / "b").symlink_to(f"../d{i}", target_is_directory=True)
    corpus = load_corpus(root, cache_dir=tmp_path / "cache")
    assert sorted(d.text for d in corpus) == sorted(f"Document {i}." for i in range(depth))


def test_a_link_into_a_hidden_folder_is_not_read(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    (root / ".hidden").mkdir(parents=True)
    (root / ".hidden" / "s.md").write_text(SECRET, encoding="utf-8")
    (root / "good.md").write_text("A document.", encoding="utf-8")
    (root / "vis.md").symlink_to(".hidden/s.md")
    (root / "peek").symlink_to(".hidden", target_is_directory=True)
    for follow in (False, True):
        corpus = load_corpus(root, cache_dir=tmp_path / "cache", follow_links=follow)
        assert [d.id for d in corpus] == ["good.md"]
        skips = _skips(corpus)
        assert {k: reason for k, (reason, _) in skips.items()} == {"vis.md": "hidden", "peek": "hidden"}


@pytest.mark.timeout(20)  # the old read blocked on the FIFO, or read /dev/zero until memory ran out
def test_a_folder_file_that_becomes_a_fifo_or_device_after_its_check_is_never_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bounded_memory: None
) -> None:
    from composer.data.documents import folder

    os.mkfifo(tmp_path / "pipe.md")
    (tmp_path / "zero.md").symlink_to("/dev/zero")
    monkeypatch.setattr(folder, "not_regular", lambda mode: None)  # each passes the check, then changes
    files = [("pipe.md", tmp_path / "pipe.md"), ("zero.md", tmp_path / "zero.md")]
    documents, report = folder.read_documents(tmp_path, files)
    assert documents == []
    assert [(d, reason) for d, reason, _ in report.skipped] == [("pipe.md", "unreadable"),
                                                                ("zero.md", "unreadable")]
    assert "it changed while the folder was read: expected a file, got a FIFO" in report.skipped[0][2]


# -- 2. FIFOs and broken links in a document folder ---------------------------------------------------


@pytest.mark.timeout(60)  # a FIFO opened would block: fail, don't hang
def test_a_fifo_and_a_broken_link_are_skipped_rows_and_strict_fails(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "good.md").write_text("A document.", encoding="utf-8")
    os.mkfifo(root / "pipe.md")
    (root / "gone.md").symlink_to("deleted.md")
    with caplog.at_level(logging.WARNING, logger="composer"):
        corpus = load_corpus(root, cache_dir=tmp_path / "cache")
    assert [d.id for d in corpus] == ["good.md"]
    skips = _skips(corpus)
    assert skips["pipe.md"] == ("special file", "a FIFO (named pipe), not a regular file: never opened")
    assert skips["gone.md"] == ("broken link", "a link to deleted.md, which does not exist")
    assert corpus.tally is not None
    assert corpus.tally.lines()[:2] == [
        "read 1 file(s) (1 .md; 0 from cache): 0 page(s), 11 characters; 2 skipped",
        "skipped 2 file(s): 1 broken link, 1 special file",
    ]
    assert "pipe.md: skipped: a FIFO" in caplog.text and "gone.md: skipped: a link" in caplog.text
    with pytest.raises(InputError, match=r"2 file\(s\) skipped \(gone.md: a link to deleted.md.*--strict"):
        load_corpus(root, strict=True, cache_dir=tmp_path / "cache")
    result = _index(tmp_path, root, "--strict")
    assert result.exit_code == 2 and "pipe.md" in result.stderr, result.output


# -- 3. input files that are devices or FIFOs, or hold an endless line -----------------------------------


@pytest.fixture
def bounded_memory() -> Iterator[None]:
    """A regression would read /dev/zero until memory runs out (24 GB in the issue): this process's address
    space is capped 2 GiB above what it maps now, so it fails with a MemoryError instead."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    status = Path("/proc/self/status").read_text(encoding="utf-8")
    mapped = next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmSize:"))
    cap = mapped + 2**31
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.mark.timeout(60)
def test_devices_and_fifos_are_refused_for_every_input_file(tmp_path: Path, bounded_memory: None) -> None:
    zero = tmp_path / "q.jsonl"
    zero.symlink_to("/dev/zero")
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    device = f"expected a file, got a character device, a link to {os.path.realpath('/dev/zero')}"
    for load in (load_questions, load_corpus, load_ranking_file):
        with pytest.raises(InputError) as err:
            load(zero)
        assert (err.value.path, err.value.message) == (str(zero), device)
        with pytest.raises(InputError) as err:
            load(fifo)
        assert (err.value.path, err.value.message) == (str(fifo), "expected a file, got a FIFO (named pipe)")
    for name in ("doc.md", "table.csv", "run.trec"):  # a document file named alone, other readers
        (tmp_path / name).symlink_to("/dev/zero")
        with pytest.raises(InputError, match="got a character device"):
            (load_ranking_file if name.endswith(".trec") else load_corpus)(tmp_path / name)
    result = _index(tmp_path, zero)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == f"error: {zero}: {device}"



@pytest.mark.timeout(60)
def test_a_config_file_that_is_a_device_or_fifo_is_refused(tmp_path: Path, bounded_memory: None) -> None:
    """Experiments, spaces and pipeline configs go through the same check as data files."""
    from composer.errors import ConfigError
    from composer.yamlfile import read_yaml

    zero = tmp_path / "exp.yaml"
    zero.symlink_to("/dev/zero")
    fifo = tmp_path / "space.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="got a character device"):
        read_yaml(zero, what="experiment file")
    with pytest.raises(ConfigError, match=r"got a FIFO \(named pipe\)"):
        read_yaml(fifo)
    with pytest.raises(ConfigError, match="experiment file not found"):
        read_yaml(tmp_path / "missing.yaml", what="experiment file")
    result = CliRunner().invoke(app, ["optimize", str(zero)])
    assert result.exit_code == 2, result.output
    assert "got a character device" in result.stderr and "Traceback" not in result.output

def test_an_endless_line_is_refused_naming_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readers_module, "MAX_LINE_BYTES", 64)
    path = tmp_path / "q.jsonl"
    fits = json.dumps({"question": "x" * (64 - 16)})  # 64 bytes, newline aside: the longest line allowed
    assert len(fits) == 64
    path.write_text(fits + "\n" + json.dumps({"question": "y" * 100}) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_questions(path)
    assert (err.value.path, err.value.line) == (str(path), 2)
    assert err.value.message.startswith("line longer than 64 bytes")
    path.write_text(fits, encoding="utf-8")  # the last line, without a newline
    assert len(load_questions(path)) == 1
    assert readers_module._size(64 * 2**20) == "64 MiB"


# -- 4. texts that show nothing ----------------------------------------------------------------------


INVISIBLE = "\u200b\u200f\u200e \ufeff\u2066\u2069"


def test_a_table_document_that_shows_nothing_is_an_error_naming_line_and_field(tmp_path: Path) -> None:
    rows = [{"id": "d1", "text": "visible"}, {"id": "d2", "text": INVISIBLE}]
    path = _jsonl(tmp_path / "corpus.jsonl", rows)
    with pytest.raises(InputError) as err:
        load_corpus(path)
    assert (err.value.path, err.value.line, err.value.field) == (str(path), 2, "text")
    assert err.value.message == (
        "document text shows nothing (only invisible characters: U+200B ZERO WIDTH SPACE, "
        "U+200E LEFT-TO-RIGHT MARK, U+200F RIGHT-TO-LEFT MARK and 3 more)"
    )
    questions = _jsonl(tmp_path / "q.jsonl", [{"question": "\u200c\u200d"}])
    with pytest.raises(InputError, match="question text shows nothing") as err:
        load_questions(questions)
    assert (err.value.line, err.value.field) == (1, "question")
    all_invisible = _jsonl(tmp_path / "all.jsonl", [{"id": f"d{i}", "text": INVISIBLE} for i in range(3)])
    result = _index(tmp_path, all_invisible)
    assert result.exit_code == 2 and "shows nothing" in result.stderr, result.output
    # Visible text with invisible marks in it is kept exactly as given.
    kept = load_corpus([{"id": "d", "text": "\u200fسلام\u200b"}])
    assert kept.documents[0].text == "\u200fسلام\u200b"


def test_a_folder_file_that_shows_nothing_is_skipped_and_a_folder_of_them_refused(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "blank.md").write_text(INVISIBLE, encoding="utf-8")
    page = f'<html><head><meta charset="utf-8"></head><body><p>{INVISIBLE}</p></body></html>'
    (root / "page.html").write_text(page, encoding="utf-8")
    with pytest.raises(InputError, match=r"no file here gives a document: 2 file\(s\) skipped"):
        load_corpus(root, cache_dir=tmp_path / "cache")
    assert _index(tmp_path, root).exit_code == 2
    (root / "good.md").write_text("A document.", encoding="utf-8")
    corpus = load_corpus(root, cache_dir=tmp_path / "cache")
    assert [d.id for d in corpus] == ["good.md"]
    skips = _skips(corpus)
    assert skips["blank.md"][0] == "empty" and "only invisible characters: U+200B" in skips["blank.md"][1]
    assert skips["page.html"][0] == "empty"


# -- 5. ids in NFD against an NFC corpus -------------------------------------------------------------


def test_nfd_ids_match_an_nfc_corpus(tmp_path: Path) -> None:
    corpus = _jsonl(tmp_path / "corpus.jsonl", [{"id": NFC, "text": "un café"}, {"id": "d2", "text": "thé"}])
    questions = _jsonl(tmp_path / "q.jsonl", [
        {"id": "q1", "question": "café?", "relevant_ids": [NFD]},
        {"id": NFD + "-q", "question": "thé?", "relevant_ids": ["d2"]},
    ])
    run = _jsonl(tmp_path / "run.jsonl", [
        {"id": "q1", "results": [{"id": NFD, "score": 2}, {"id": "d2", "score": 1}]},
        {"id": NFC + "-q", "results": [{"id": "d2", "score": 2}, {"id": NFC, "score": 1}]},
    ])
    report = composer.evaluate(run, questions, corpus, k=[1], workdir=tmp_path / "work")
    assert report.values("hit_rate@1").tolist() == [1.0, 1.0]
    loaded = load_questions(questions, corpus=load_corpus(corpus), strict=True)
    assert [q.relevant_ids for q in loaded] == [(NFC,), ("d2",)] and loaded.questions[1].id == NFC + "-q"
    trec = tmp_path / "run.trec"
    trec.write_text(f"q1 Q0 {NFD} 1 2.0 sys\n{NFD}-q Q0 d2 1 2.0 sys\n", encoding="utf-8")
    assert [h.id for h in load_ranking_file(trec)["q1"]] == [NFC] and NFC + "-q" in load_ranking_file(trec)



def test_nfd_ids_from_a_users_own_retriever_or_run_mapping_match_an_nfc_corpus(tmp_path: Path) -> None:
    """The ids a user's system returns, and an in-memory run's question ids, are kept NFC like file ids."""
    corpus = [{"id": NFC, "text": "un café"}, {"id": "d2", "text": "thé"}]
    questions = [{"id": NFC + "-q", "question": "café?", "relevant_ids": [NFC]}]

    def retrieve(question: str) -> list[dict[str, Any]]:
        return [{"id": NFD, "score": 2.0}, {"id": "d2", "score": 1.0}]

    report = composer.evaluate(retrieve, questions, corpus, k=[1], workdir=tmp_path / "a")
    assert report.values("hit_rate@1").tolist() == [1.0]
    run = {NFD + "-q": [NFD, "d2"]}
    report = composer.evaluate(run, questions, corpus, k=[1], workdir=tmp_path / "b")
    assert report.values("hit_rate@1").tolist() == [1.0]

def test_nfd_file_names_give_nfc_document_ids(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / f"{NFD}.md").write_text("A document.", encoding="utf-8")  # as macOS writes names
    corpus = load_corpus(root, cache_dir=tmp_path / "cache")
    assert [d.id for d in corpus] == [f"{NFC}.md"]
    (root / f"{NFC}.md").write_text("Another.", encoding="utf-8")  # both spellings: one id, not two
    skips = _skips(load_corpus(root, cache_dir=tmp_path / "cache"))
    message = f"the same name as {NFD}.md once Unicode-normalized (NFC)"
    assert list(skips.values()) == [("duplicate name", message)]


def test_nfd_ids_of_documents_and_questions_made_in_python_match_a_retrievers(tmp_path: Path) -> None:
    """Documents and questions built in Python keep NFC ids like loaded ones, so a user's retriever that
    returns the NFD spelling still matches (the retriever's ids are normalized too)."""
    from composer.data.types import Document, Question, QuestionSet

    corpus = Corpus([Document(NFD, "un café"), Document("d2", "thé")], "python")
    questions = QuestionSet([Question(NFD + "-q", "café?", relevant_ids=(NFD,))], "python")
    assert corpus.documents[0].id == NFC and questions.questions[0].relevant_ids == (NFC,)
    for returned in (NFD, NFC):
        report = composer.evaluate(lambda q, r=returned: [r, "d2"], questions, corpus, k=[1],
                                   workdir=tmp_path / returned)
        assert report.values("hit_rate@1").tolist() == [1.0]
