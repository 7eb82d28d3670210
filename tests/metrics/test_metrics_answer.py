"""Deterministic answer metrics, refusal detection and the scorers built on them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from composer.data.types import Question
from composer.metrics.answer import exact_match, is_refusal, overlap_faithfulness, token_f1
from composer.metrics.scorers import (
    AnswerScorer,
    ExactMatchScorer,
    OverlapFaithfulnessScorer,
    Score,
    TokenF1Scorer,
    default_scorers,
)

ARCD = Path(__file__).resolve().parents[2] / "examples" / "arcd"
CONTEXT = "جمال أحمد حمزة خاشقجي صحفي وإعلامي سعودي، ولد في المدينة المنورة عام 1958."


# token F1 and exact match --------------------------------------------------------------------------------


def test_token_f1_hand_computed() -> None:
    # answer tokens {صحفي, واعلامي, سعودي}, gold {صحفي, واعلامي}: P = 2/3, R = 1, F1 = 0.8
    assert token_f1("صحفي وإعلامي سعودي", ["صحفي وإعلامي"]) == pytest.approx(0.8)
    assert token_f1("the cat sat on the mat", "a cat on a mat") == pytest.approx(0.8)  # stopwords dropped
    assert token_f1("مدريد", ["برشلونة"]) == 0.0


def test_token_f1_takes_the_best_gold_answer() -> None:
    assert token_f1("المدينة المنورة", ["مكة", "المدينة المنوّرة"]) == 1.0
    assert token_f1("المدينة", "المدينة المنورة") == pytest.approx(2 / 3)


def test_token_f1_falls_back_to_all_tokens_for_function_word_answers() -> None:
    assert token_f1("هو", ["هو"]) == 1.0
    assert token_f1("هو", ["هي"]) == 0.0


def test_token_f1_needs_a_gold_answer() -> None:
    with pytest.raises(ValueError, match="gold answer"):
        token_f1("x", [])


def test_exact_match_folds_spelling_digits_and_punctuation() -> None:
    assert exact_match("أحمد", ["احمد"]) == 1.0
    assert exact_match("عام ١٩٥٨.", "عام 1958") == 1.0
    assert exact_match("مادريد", ["مادرید"]) == 1.0  # Arabic and Persian yeh
    assert exact_match("کتاب‌ها", ["کتابها"]) == 1.0  # ZWNJ
    assert exact_match("Paris, France", ["paris france"]) == 1.0
    assert exact_match("المدينة", ["المدينة المنورة"]) == 0.0


# faithfulness --------------------------------------------------------------------------------------------


def test_overlap_faithfulness_is_the_share_of_backed_content_words() -> None:
    assert overlap_faithfulness("ولد خاشقجي في المدينة المنورة عام 1958", [CONTEXT]) == 1.0
    # six content words (ولد خاشقجي المدينة المنورة عام 1960), one of them unsupported
    assert overlap_faithfulness("ولد خاشقجي في المدينة المنورة عام 1960", [CONTEXT]) == pytest.approx(5 / 6)
    assert overlap_faithfulness("الصحفيون", [CONTEXT]) == 1.0  # stemmed: backed by صحفي
    assert overlap_faithfulness("ولد في مكة", ["نص أول", "ولد هناك"]) == 0.5  # any context counts


def test_overlap_faithfulness_edge_cases() -> None:
    assert overlap_faithfulness("في من على", [CONTEXT]) is None  # no content word
    assert overlap_faithfulness("مادرید", []) == 0.0  # nothing retrieved backs it
    assert overlap_faithfulness("پایتخت اسپانیا مادرید است", ["مادرید پایتخت و بزرگترین شهر اسپانیا"]) == 1.0


# refusals ------------------------------------------------------------------------------------------------

REFUSALS = [
    "I don't know.",
    "I don’t know the answer.",
    "Sorry, I cannot answer this question based on the context.",
    "The provided context does not mention his birth date.",
    "This information is not mentioned in the provided text.",
    "There is no information about that in the documents.",
    "The answer cannot be determined from the context.",
    "لا أعرف.",
    "لا اعلم",
    "عذراً، لا يمكنني الإجابة على هذا السؤال.",
    "لا يحتوي النص على معلومات حول تاريخ ميلاده.",
    "النص المقدم لا يذكر ذلك.",
    "لا توجد معلومات كافية في السياق.",
    "هذه المعلومة غير مذكورة في النص.",
    "لم يرد ذكر ذلك في النصوص المقدمة.",
    "لا يوجد في النص ما يشير إلى ذلك",
    "لم أجد الإجابة في المقاطع.",
    "نمی‌دانم.",
    "نمیدانم",
    "متأسفانه اطلاعاتی در این مورد در متن وجود ندارد.",
    "پاسخ این سوال در متن نیست.",
    "در متن به این موضوع اشاره‌ای نشده است.",
    "نمی‌توانم به این سوال پاسخ دهم.",
    "اطلاعی ندارم.",
    "متن ارائه شده اطلاعاتی درباره این موضوع ندارد.",
    "متأسفانه قادر به پاسخ به این سوال نیستم.",
]

ANSWERS = [
    "He was born in 1958.",
    "He did not know about the plan.",
    "The treaty does not contain any clause on Spain.",
    "Unknown",
    "The context window is 8k tokens.",
    "لا يعرف مكان دفنه.",  # "his burial place is not known": a factual answer
    "غير معروف",
    "لا تحتوي الذرة على شحنة كهربائية.",
    "لا يوجد نهر دائم في السعودية.",
    "لم يذكر المؤرخون سبب وفاته.",
    "نشر النص الكامل للمعاهدة عام 1920.",
    "او نمی‌دانست که جنگ آغاز شده است.",
    "در ایران دریاچه‌ای به این نام وجود ندارد.",
    "علت مرگ او مشخص نشده است.",
    "هیچ‌کس نمی‌داند.",
    "در متن قانون اساسی آمده است که رئیس جمهور منتخب مردم است.",
    "او قادر به پاسخگویی به پرسش‌های علمی بود.",
]


@pytest.mark.parametrize("answer", REFUSALS)
def test_refusals_are_detected(answer: str) -> None:
    assert is_refusal(answer)


@pytest.mark.parametrize("answer", ANSWERS)
def test_factual_negations_are_not_refusals(answer: str) -> None:
    assert not is_refusal(answer)


@pytest.mark.parametrize("dataset", ["arcd", "persianqa"])
def test_no_gold_answer_of_arcd_or_persianqa_reads_as_a_refusal(
    dataset: str, request: pytest.FixtureRequest
) -> None:
    folder = ARCD if dataset == "arcd" else request.getfixturevalue("persianqa_dir")
    golds = [
        answer
        for line in (folder / "questions.jsonl").read_text(encoding="utf-8").splitlines()
        for answer in json.loads(line).get("answers", [])
    ]
    assert len(golds) > 600
    assert [a for a in golds if is_refusal(a)] == []


# scorers -------------------------------------------------------------------------------------------------

QUESTION = Question("q1", "من هو جمال خاشقجي؟", ("d1",), reference_answer="صحفي وإعلامي", answers=("إعلامي",))


def test_default_scorers_and_names() -> None:
    scorers: list[AnswerScorer] = default_scorers()
    assert [s.name for s in scorers] == ["token_f1", "exact_match", "faithfulness_overlap"]


@pytest.mark.parametrize("scorer", default_scorers(), ids=lambda s: s.name)
def test_empty_answers_and_refusals_are_not_scored(scorer: AnswerScorer) -> None:
    """Except that refusing an answerable question scores 0 on the answer metrics (F1, exact match)."""
    assert scorer.score(QUESTION, "", [CONTEXT], None) == Score(None, "empty answer")
    assert scorer.score(QUESTION, "  \n", [CONTEXT], None) == Score(None, "empty answer")
    assert scorer.score(QUESTION, None, [CONTEXT], None) == Score(None, "empty answer")
    refused = scorer.score(QUESTION, "لا يحتوي النص على الإجابة", [CONTEXT], None)
    if scorer.name == "faithfulness_overlap":
        assert refused == Score(None, "refusal")
    else:
        assert refused == Score(0.0, "refusal of an answerable question")
    assert scorer.score(Question("q2", "؟"), "لا يحتوي النص على الإجابة", [CONTEXT], None) == Score(
        None, "refusal"
    )


def test_token_f1_scorer_uses_the_question_gold_answers_unless_given_references() -> None:
    scorer = TokenF1Scorer()
    score = scorer.score(QUESTION, "صحفي وإعلامي سعودي", [CONTEXT], None)
    assert score.score == pytest.approx(0.8)
    assert "صحفي وإعلامي" in score.reason
    assert scorer.score(QUESTION, "سعودي", [], "صحفي سعودي").score == pytest.approx(2 / 3)
    assert scorer.score(QUESTION, "سعودي", [], ["مصري", "سعودي"]).score == 1.0
    no_gold = Question("q2", "؟")
    assert scorer.score(no_gold, "سعودي", [], None) == Score(None, "no reference answer")


def test_exact_match_scorer_reports_the_matching_gold() -> None:
    scorer = ExactMatchScorer()
    assert scorer.score(QUESTION, "اعلامي", [], None) == Score(1.0, "matches gold answer 'إعلامي'")
    miss = scorer.score(QUESTION, "سعودي", [], None)
    assert miss.score == 0.0
    assert "none of 2" in miss.reason


def test_faithfulness_scorer_lists_unsupported_words() -> None:
    scorer = OverlapFaithfulnessScorer()
    score = scorer.score(QUESTION, "ولد خاشقجي في المدينة المنورة عام 1960", [CONTEXT], None)
    assert score.score == pytest.approx(5 / 6)
    assert score.reason.startswith("5/6 ")
    assert "1960" in score.reason
    assert scorer.score(QUESTION, "في من", [CONTEXT], None) == Score(None, "answer has no content words")
