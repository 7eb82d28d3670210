"""What makes a follow-up: an earlier user turn. A row that says it is a later turn carries that turn's
history; two first turns of one conversation are a repeat; a follow-up's language is read with its
conversation (two Persian words alone read as Arabic)."""

from __future__ import annotations

import pytest

from composer.data import Question, Turn, load_questions
from composer.errors import InputError
from composer.generation.generator import answer_messages
from composer.llm.prompt import conversation_language, prompt_language


def test_a_later_turn_without_its_history_is_one_located_error() -> None:
    rows = [{"id": "a", "question": "من هو خاشقجي؟", "conversation_id": "c", "turn": 1},
            {"id": "b", "question": "ومتى توفي؟", "conversation_id": "c", "turn": 2}]
    with pytest.raises(InputError) as caught:
        load_questions(rows)
    assert (caught.value.line, caught.value.field) == (2, "turn")
    assert "history holds 0 earlier user turn" in caught.value.message


def test_two_first_turns_of_one_conversation_are_a_repeat() -> None:
    rows = [{"id": "a", "question": "x", "conversation_id": "c"},
            {"id": "b", "question": "y", "conversation_id": "c"}]
    with pytest.raises(InputError, match="turn 1 twice"):
        load_questions(rows)


def test_an_assistants_greeting_alone_leaves_a_first_turn() -> None:
    greeted = Question("q", "من هو خاشقجي؟", history=(Turn("assistant", "مرحبا، كيف أساعدك؟"),))
    assert not greeted.is_follow_up
    assert Question("f", "ومتى توفي؟", history=(Turn("user", "من هو خاشقجي؟"),)).is_follow_up


def test_a_short_persian_follow_up_is_answered_in_persian() -> None:
    history = (Turn("user", "پدر فرهاد مجیدی کیست و کجا زندگی می‌کند؟"), Turn("assistant", "او در تهران است."))
    assert prompt_language("و مادرش؟") == "ar"  # two words say too little alone
    assert conversation_language("و مادرش؟", history) == "fa"
    messages = answer_messages("grounded", "و مادرش؟", ["متن"], history)
    persian = answer_messages("grounded", "مادر فرهاد مجیدی کیست؟", ["متن"])
    assert messages[0]["content"] == persian[0]["content"]  # the Persian system prompt
