"""Issue 44, point 7: the Persian conversational set is built by rule from PersianQA's layout (a stand-in
here: PersianQA is GPL-3.0 and not in the repository) and reads back as a conversational question set."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from composer.data import load_questions

CORPUS = [
    {"id": "p1", "title": "حافظ (شاعر)", "text": "حافظ شاعر ایرانی قرن هشتم است که در شیراز متولد شد."},
    {"id": "p2", "title": "دماوند", "text": "دماوند بلندترین کوه ایران با ارتفاع ۵۶۱۰ متر است."},
]
QUESTIONS = [
    {"id": "a1", "question": "حافظ در کدام شهر متولد شد؟", "relevant_ids": ["p1"], "answers": ["شیراز"]},
    {"id": "a2", "question": "حافظ در چه قرنی زندگی می‌کرد؟", "relevant_ids": ["p1"], "answers": ["هشتم"]},
    {"id": "b1", "question": "ارتفاع دماوند چقدر است؟", "relevant_ids": ["p2"], "answers": ["۵۶۱۰ متر"]},
    {"id": "b2", "question": "دماوند در کدام کشور است؟", "relevant_ids": ["p2"], "answers": ["ایران"]},
    {"id": "b3", "question": "بلندترین کوه ایران کدام است؟", "relevant_ids": ["p2"], "answers": ["دماوند"]},
]


def test_follow_ups_name_the_subject_by_a_pronoun(tmp_path: Path, repo_root: Path) -> None:
    for name, rows in (("corpus.jsonl", CORPUS), ("questions.jsonl", QUESTIONS)):
        (tmp_path / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    out = tmp_path / "conversations.jsonl"
    done = subprocess.run([sys.executable, str(repo_root / "benchmarks" / "build_persian_conversations.py"),
                           "--persianqa", str(tmp_path), "--out", str(out)],
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "2 conversations, 2 follow-ups" in done.stdout
    by_id = {q.id: q for q in load_questions(out)}
    assert by_id["conv-p1#2"].question == "او در چه قرنی زندگی می‌کرد؟"  # a person: «او»
    assert by_id["conv-p1#2"].standalone == "حافظ در چه قرنی زندگی می‌کرد؟"
    assert by_id["conv-p2#2"].question == "آن در کدام کشور است؟"
    assert [t.text for t in by_id["conv-p2#2"].history] == ["ارتفاع دماوند چقدر است؟", "۵۶۱۰ متر"]
    assert by_id["conv-p2#2"].relevant_ids == ("p2",) and len(by_id) == 4  # b3 names no subject it leans on
