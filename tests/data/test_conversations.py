"""Issue 44, point 1: conversational question sets in every format, and each bad conversation as one located
line (load_questions and `composer eval`, exit 2, nothing written)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from composer.cli.app import app
from composer.data import Turn, load_questions
from composer.errors import InputError

FIRST = "من هو جمال خاشقجي؟"
FOLLOW_UP = "ومتى توفي؟"
ANSWER = "صحفي سعودي."
HISTORY = [{"role": "user", "text": FIRST}, {"role": "assistant", "text": ANSWER}]
TURNS = (Turn("user", FIRST), Turn("assistant", ANSWER))
ROWS: list[dict[str, Any]] = [
    {"id": "a", "question": FIRST, "relevant_ids": ["d1"], "conversation_id": "c1", "turn": 1},
    {"id": "b", "question": FOLLOW_UP, "relevant_ids": ["d1"], "conversation_id": "c1", "turn": 2,
     "history": HISTORY, "standalone": "متى توفي جمال خاشقجي؟"},
]


def _jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _follow_up(source: Any) -> Any:
    questions = load_questions(source)
    follow_up = questions.questions[-1]
    assert questions.has_follow_ups()
    assert (follow_up.conversation_id, follow_up.turn, follow_up.history) == ("c1", 2, TURNS)
    assert "history" not in follow_up.metadata and not follow_up.metadata
    return follow_up


def _tabular(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: json.dumps(v, ensure_ascii=False) if isinstance(v, list) else v for k, v in r.items()}
            for r in rows]


def test_every_format_reads_the_history(tmp_path: Path) -> None:
    assert _follow_up(_jsonl(tmp_path / "q.jsonl", ROWS)).standalone == "متى توفي جمال خاشقجي؟"
    (tmp_path / "q.json").write_text(json.dumps(ROWS, ensure_ascii=False, indent=1), encoding="utf-8")
    _follow_up(tmp_path / "q.json")
    _follow_up(ROWS)
    table = pd.DataFrame(_tabular(ROWS))
    _follow_up(table)  # the history as a JSON cell
    table.to_csv(tmp_path / "q.csv", index=False)
    _follow_up(tmp_path / "q.csv")
    table.to_csv(tmp_path / "q.tsv", index=False, sep="\t")
    _follow_up(tmp_path / "q.tsv")
    table.to_excel(tmp_path / "q.xlsx", index=False)
    _follow_up(tmp_path / "q.xlsx")
    pd.DataFrame(ROWS).to_parquet(tmp_path / "q.parquet")  # a list of structs, as Parquet holds it
    _follow_up(tmp_path / "q.parquet")


def test_openai_messages_and_langchain_chat_history() -> None:
    messages = [{"role": "system", "content": "You answer in Arabic."}, {"role": "user", "content": FIRST},
                {"role": "assistant", "content": [{"type": "text", "text": ANSWER}]}]
    base = {"id": "b", "conversation_id": "c1"}
    # The question is the last user message when `question` is absent; system messages are dropped.
    asked = [*messages, {"role": "user", "content": FOLLOW_UP}]
    assert _follow_up([{**base, "messages": asked}]).question == FOLLOW_UP
    # A trailing user message that repeats the question is the question, not history.
    _follow_up([{**base, "question": FOLLOW_UP, "messages": asked}])
    # Any other last message is history.
    other = load_questions([{"question": FOLLOW_UP, "messages": messages[1:2]}]).questions[0]
    assert (other.question, other.history) == (FOLLOW_UP, (Turn("user", FIRST),))
    _follow_up([{**base, "question": FOLLOW_UP, "chat_history": [["human", FIRST], ["ai", ANSWER]]}])
    _follow_up([{**base, "question": FOLLOW_UP, "chat_history": [{"type": "human", "content": FIRST},
                                                                 {"type": "ai", "content": ANSWER}]}])
    follow_up = load_questions([{"question": FOLLOW_UP, "rewrite": "x", "history": HISTORY}]).questions[0]
    assert (follow_up.conversation_id, follow_up.turn, follow_up.standalone) == (None, 2, "x")
    assert follow_up.conversation == follow_up.id  # a conversation of one, keyed by its id


def test_one_conversation_per_line(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "c.jsonl", [
        {"id": "c1", "topic": "journalism", "turns": [
            {"role": "user", "text": FIRST, "relevant_ids": ["d1"], "reference_answer": ANSWER},
            {"role": "assistant", "text": ANSWER},
            ["user", "شكرا"],  # unlabelled: history only
            {"role": "assistant", "text": "عفوا"},
            {"role": "user", "text": FOLLOW_UP, "answers": ["2018"], "standalone": "متى توفي خاشقجي؟"}]},
        {"turns": [{"role": "user", "text": "سؤال؟", "id": "own"}]},
        {"id": "c3", "turns": [{"role": "user", "text": "سؤال آخر؟", "Ground_Truth": "جواب"}]},  # an alias
    ])
    first, follow_up, alone, aliased = load_questions(path)
    assert (aliased.id, aliased.reference_answer) == ("c3#1", "جواب")
    assert (first.id, first.turn, first.history, first.reference_answer) == ("c1#1", 1, (), ANSWER)
    assert (follow_up.id, follow_up.turn, follow_up.answers) == ("c1#3", 3, ("2018",))
    assert [t.text for t in follow_up.history] == [FIRST, ANSWER, "شكرا", "عفوا"]
    assert follow_up.metadata == {"topic": "journalism"} and follow_up.standalone == "متى توفي خاشقجي؟"
    assert (alone.id, alone.conversation_id) == ("own", alone.conversation_id)
    assert alone.conversation_id is not None and alone.conversation_id.startswith("c-")


def test_standalone_sets_keep_their_fingerprint() -> None:
    rows = [{"id": "a", "question": FIRST, "relevant_ids": ["d1"]}]
    before = hashlib.sha256(json.dumps(["a", FIRST, ["d1"], None, [], []], ensure_ascii=False).encode())
    assert load_questions(rows).fingerprint() == before.hexdigest()[:16]
    assert not load_questions(rows).has_follow_ups()


def _history(n: int, text: str = "سؤال") -> list[dict[str, str]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "text": text} for i in range(n)]


def _pair(first: dict[str, Any], second: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"question": "q1?", "conversation_id": "c", **first}, {"question": "q2?", "conversation_id": "c",
                                                                   **second}]


BAD: dict[str, tuple[list[dict[str, Any]], int, str, str]] = {
    "role": ([{"question": "x", "history": [{"role": "bot", "text": "a"}]}], 1, "history[0].role",
             "role 'bot' is neither user nor assistant"),
    "empty turn": ([{"question": "x", "history": [{"role": "user", "text": "  "}]}], 1, "history[0].text",
                   "empty turn"),
    "repeated turn": (_pair({"turn": 1}, {"turn": 1}), 2, "turn", "has turn 1 twice (lines 1 and 2)"),
    "out of order": (_pair({"turn": 2, "history": _history(1)}, {"turn": 1}), 2, "turn",
                     "turn 1 comes after turn 2"),
    "two histories": (_pair({"turn": 2, "history": _history(1, "a")},
                            {"turn": 2, "history": _history(1, "b")}),
                      2, "turn", "has turn 2 with two different histories (lines 1 and 2)"),
    "inconsistent history": (_pair({"history": _history(2, "a")}, {"history": _history(4, "b")}), 2,
                             "history", "differs from the same conversation on line 1"),
    "turns over the cap": ([{"question": "x", "history": _history(51)}], 1, "history",
                           "a history of 51 turns is over the cap of 50"),
    "characters over the cap": ([{"question": "x", "history": [{"role": "user", "text": "a" * 20_001}]}], 1,
                                "history", "a history of 20001 characters is over the cap of 20000"),
    "turn against history": ([{"question": "x", "turn": 3, "history": _history(1)}], 1, "turn",
                             "turn 3, but its history holds 1 earlier user turn(s)"),
    "assistant last": ([{"messages": [{"role": "user", "content": "a"},
                                      {"role": "assistant", "content": "b"}]}], 1, "messages",
                       "the last of 'messages' must be the user's question"),
    "nothing labelled": ([{"id": "c", "turns": [{"role": "user", "text": "a"}]}], 1, "turns",
                         "no user turn carries an id or a label"),
    "labelled assistant": ([{"id": "c", "turns": [{"role": "user", "text": "a", "id": "x"},
                                                  {"role": "assistant", "text": "b", "answers": ["b"]}]}],
                           1, "turns[1]", "an assistant turn carries labels"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_conversation_is_one_located_error(case: str, tmp_path: Path) -> None:
    rows, line, field, fragment = BAD[case]
    path = _jsonl(tmp_path / "q.jsonl", rows)
    with pytest.raises(InputError) as info:
        load_questions(path)
    assert (info.value.path, info.value.line, info.value.field) == (str(path), line, field)
    assert fragment in info.value.message
    run = _jsonl(tmp_path / "run.jsonl", [{"id": "x", "results": [{"id": "d1"}]}])
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["eval", str(path), "--run", str(run), "--out", str(out)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert lines[0].startswith(f"error: {path}:{line} (field '{field}'): ") and fragment in lines[0]
    assert not out.exists()


def test_history_caps_follow_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPOSER_MAX_HISTORY_TURNS", "1")
    with pytest.raises(InputError, match=r"over the cap of 1 \(\$COMPOSER_MAX_HISTORY_TURNS\)"):
        load_questions([{"question": "x", "history": _history(2)}])
    monkeypatch.setenv("COMPOSER_MAX_HISTORY_TURNS", "many")
    with pytest.raises(InputError, match="expected a whole number"):
        load_questions([{"question": "x", "history": _history(2)}])


def test_bundled_arcd_conversations_load_on_their_corpus(repo_root: Path) -> None:
    from composer.data import load_corpus

    corpus = load_corpus(repo_root / "examples" / "arcd-sample" / "corpus.jsonl")
    path = repo_root / "examples" / "arcd-conversations" / "questions.jsonl"
    questions = load_questions(path, corpus=corpus, strict=True)
    conversations = questions.conversations()
    follow_ups = [q for q in questions if q.is_follow_up]
    assert len(conversations) >= 25 and len(follow_ups) >= 60
    assert all(q.standalone and q.standalone != q.question and q.relevant_ids for q in follow_ups)
