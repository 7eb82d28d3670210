"""The offline extractive answerer."""

from __future__ import annotations

import pytest

from composer.data.types import Hit, Question
from composer.generation import Answerer, ExtractiveAnswerer
from composer.metrics.answer import token_f1

Q = Question(id="q", question="في أي مدينة ولد جمال خاشقجي؟")


def hit(i: int, text: str | None) -> Hit:
    return Hit(id=f"d{i}#0", score=1.0 / (i + 1), text=text, doc_id=f"d{i}")


def test_picks_the_sentence_sharing_most_content_words() -> None:
    text = "كان صحفيا معروفا. ولد خاشقجي في مدينة المدينة المنورة عام 1958. توفي في إسطنبول."
    answer = ExtractiveAnswerer().answer(Q, [hit(0, text)])
    assert answer == "ولد خاشقجي في مدينة المدينة المنورة عام 1958."
    assert token_f1(answer, ["المدينة المنورة"]) > 0


def test_looks_into_lower_ranked_hits_but_only_the_first_max_contexts() -> None:
    hits = [hit(0, "نص لا علاقة له بالسؤال."), hit(1, "ولد جمال خاشقجي في المدينة المنورة."),
            hit(2, "شيء آخر."), hit(3, "ولد جمال خاشقجي في مدينة المدينة المنورة.")]
    assert ExtractiveAnswerer().answer(Q, hits) == "ولد جمال خاشقجي في المدينة المنورة."
    assert ExtractiveAnswerer(max_contexts=4).answer(Q, hits) == "ولد جمال خاشقجي في مدينة المدينة المنورة."


def test_ties_go_to_the_higher_ranked_hit_and_the_earlier_sentence() -> None:
    hits = [hit(0, "خاشقجي صحفي. خاشقجي كاتب."), hit(1, "خاشقجي سعودي.")]
    assert ExtractiveAnswerer().answer(Q, hits) == "خاشقجي صحفي."


def test_without_overlap_the_top_hits_first_sentence_and_without_text_nothing() -> None:
    unrelated = [hit(0, "السماء زرقاء. البحر واسع."), hit(1, "شيء.")]
    assert ExtractiveAnswerer().answer(Q, unrelated) == "السماء زرقاء."
    assert ExtractiveAnswerer().answer(Q, []) == ""
    assert ExtractiveAnswerer().answer(Q, [hit(0, None), hit(1, "  ")]) == ""


def test_persian_question_and_answer() -> None:
    q = Question(id="p", question="پایتخت ایران کدام شهر است؟")
    text = "ایران کشوری در آسیا است. پایتخت ایران شهر تهران است."
    assert ExtractiveAnswerer().answer(q, [hit(0, text)]) == "پایتخت ایران شهر تهران است."


def test_is_an_answerer() -> None:
    answerer: Answerer = ExtractiveAnswerer()
    assert answerer.name == "extractive"
    with pytest.raises(ValueError):
        ExtractiveAnswerer(max_contexts=0)
