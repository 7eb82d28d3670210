"""The offline extractive answerer, and the pipeline's answering path around it."""

from __future__ import annotations

from composer.data.types import Hit, Question
from composer.generation import ExtractiveAnswerer, answer_questions, contexts_for
from composer.metrics.answer import token_f1

Q = "في أي مدينة ولد جمال خاشقجي؟"


def test_picks_the_sentence_sharing_most_content_words() -> None:
    text = "كان صحفيا معروفا. ولد خاشقجي في مدينة المدينة المنورة عام 1958. توفي في إسطنبول."
    answer = ExtractiveAnswerer().answer(Q, [text])
    assert answer == "ولد خاشقجي في مدينة المدينة المنورة عام 1958."
    assert token_f1(answer, ["المدينة المنورة"]) > 0


def test_reads_every_passage_it_is_given() -> None:
    passages = ["نص لا علاقة له بالسؤال.", "ولد جمال خاشقجي في المدينة المنورة.", "شيء آخر.",
                "ولد جمال خاشقجي في مدينة المدينة المنورة."]
    assert ExtractiveAnswerer().answer(Q, passages[:3]) == "ولد جمال خاشقجي في المدينة المنورة."
    assert ExtractiveAnswerer().answer(Q, passages) == "ولد جمال خاشقجي في مدينة المدينة المنورة."


def test_ties_go_to_the_higher_ranked_passage_and_the_earlier_sentence() -> None:
    assert ExtractiveAnswerer().answer(Q, ["خاشقجي صحفي. خاشقجي كاتب.", "خاشقجي سعودي."]) == "خاشقجي صحفي."


def test_without_overlap_the_top_passages_first_sentence_and_without_text_nothing() -> None:
    assert ExtractiveAnswerer().answer(Q, ["السماء زرقاء. البحر واسع.", "شيء."]) == "السماء زرقاء."
    assert ExtractiveAnswerer().answer(Q, []) == ""
    assert ExtractiveAnswerer().answer(Q, ["  "]) == ""


def test_persian_question_and_answer() -> None:
    text = "ایران کشوری در آسیا است. پایتخت ایران شهر تهران است."
    assert ExtractiveAnswerer().answer("پایتخت ایران کدام شهر است؟", [text]) == "پایتخت ایران شهر تهران است."


def test_answers_carry_the_passages_they_were_given() -> None:
    hits = [Hit("a", 3.0, "ولد خاشقجي في المدينة المنورة."), Hit("b", 2.0, None), Hit("c", 1.0, "  "),
            Hit("d", 0.5, "نص آخر.")]
    contexts = contexts_for(hits, 5)
    assert contexts == ["ولد خاشقجي في المدينة المنورة.", "نص آخر."]
    assert contexts_for(hits, 1) == contexts[:1]
    answers = answer_questions([Question("q", Q)], [contexts])
    assert answers["q"].contexts == tuple(contexts) and answers["q"].result is None
    assert answers["q"].text == "ولد خاشقجي في المدينة المنورة."
