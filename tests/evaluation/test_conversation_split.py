"""Issue 44, point 3: the selection/held-out split and the ``max_questions`` pick keep every conversation on
one side, and leave sets of questions that stand alone split as before."""

from __future__ import annotations

import hashlib

import pytest

from composer.data.types import Question, QuestionSet, Turn
from composer.errors import ConfigError
from composer.evaluation.splits import SplitConfig, split_questions, stratified_pick


def _conversations(n: int, turns: int) -> QuestionSet:
    questions = []
    for c in range(n):
        history: tuple[Turn, ...] = ()
        for t in range(1, turns + 1):
            text = f"سؤال {t} من المحادثة {c}؟"
            questions.append(Question(id=f"c{c}#{t}", question=text, relevant_ids=(f"d{c}",),
                                      conversation_id=f"c{c}", turn=t, history=history))
            history = (*history, Turn("user", text), Turn("assistant", "جواب"))
    return QuestionSet(questions, "<test>")


def _sides(selection: QuestionSet, held: QuestionSet | None) -> tuple[set[str], set[str]]:
    assert held is not None
    return {q.conversation for q in selection}, {q.conversation for q in held}


@pytest.mark.parametrize("seed", range(6))
def test_two_conversations_of_ten_turns_never_straddle_the_split(seed: int) -> None:
    questions = _conversations(2, 10)
    selection, held = split_questions(questions, SplitConfig(held_out=0.5, seed=seed))
    chosen, kept_back = _sides(selection, held)
    assert len(chosen) == len(kept_back) == 1 and not chosen & kept_back
    assert len(selection) == len(held or ()) == 10


def test_many_conversations_stay_whole_and_near_the_share() -> None:
    questions = _conversations(40, 5)
    selection, held = split_questions(questions, SplitConfig(held_out=0.25, seed=3))
    chosen, kept_back = _sides(selection, held)
    assert not chosen & kept_back and len(chosen | kept_back) == 40
    assert len(held or ()) == 50  # 10 whole conversations: exactly the share here
    assert [q.id for q in selection] == [q.id for q in questions if q.conversation in chosen]  # file order


def test_a_share_no_whole_conversation_meets_says_so() -> None:
    whole = r"of 20 questions \(in 2 conversations, each kept whole\) leaves a side"
    with pytest.raises(ConfigError, match=whole):
        split_questions(_conversations(2, 10), SplitConfig(held_out=0.2))


def test_the_max_questions_pick_takes_whole_conversations() -> None:
    questions = _conversations(10, 4)
    picked = stratified_pick(questions, 12, seed=1)
    by_conversation = picked.conversations()
    assert len(picked) == 12 and len(by_conversation) == 3
    assert all(len(members) == 4 for members in by_conversation.values())


def test_questions_that_stand_alone_split_as_before() -> None:
    questions = QuestionSet([Question(id=f"q{i}", question=f"سؤال {i}؟") for i in range(37)], "<test>")
    for seed, share in ((0, 0.2), (4, 0.3), (7, 0.5)):
        ranked = sorted(questions, key=lambda q: hashlib.sha256(f"{seed}:{q.id}".encode()).hexdigest())
        before = {q.id for q in ranked[: round(len(ranked) * share)]}  # the split as it was before issue 44
        _, held = split_questions(questions, SplitConfig(held_out=share, seed=seed))
        assert {q.id for q in held or ()} == before
