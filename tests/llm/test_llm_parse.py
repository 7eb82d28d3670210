"""The reply parser on replies as models really write them: fenced, chatty, sloppy, in Arabic digits."""

from __future__ import annotations

import pytest

from composer.llm.parse import (
    ParseError,
    as_number,
    as_verdict,
    extract_json,
    normalize_digits,
    parse_classification,
    parse_queries,
    parse_questions,
    parse_ranking,
    parse_rating,
    parse_score,
    parse_statements,
    parse_verdicts,
)

# (reply, expected rating, expected reason) — each a shape seen from real models.
RATING_REPLIES = [
    ('{"rating": 4, "reason": "minor omission"}', 4.0, "minor omission"),
    ('```json\n{"rating": 5, "reason": "exact"}\n```', 5.0, "exact"),
    ('```\n{"rating": 3}\n```', 3.0, ""),
    (
        'Here is my evaluation:\n{"rating": 2, "reason": "mostly wrong"}\nLet me know if you need more.',
        2.0,
        "mostly wrong",
    ),
    ("{'rating': 4, 'reason': 'close enough'}", 4.0, "close enough"),
    ('{"rating": 4, "reason": "ok",}', 4.0, "ok"),
    ('{"rating": ٤, "reason": "صحيحة مع نقص طفيف"}', 4.0, "صحيحة مع نقص طفيف"),
    ('{"rating": "۳", "reason": "تا حدی درست"}', 3.0, "تا حدی درست"),
    ('{"rating": 7, "reason": "excellent!"}', 5.0, "excellent!"),
    ('{"rating": 0, "reason": "nonsense"}', 1.0, "nonsense"),
    ('{"rating": "4/5", "reason": "good"}', 4.0, "good"),
    ('{"Rating": 4.5, "Reason": "nearly"}', 4.5, "nearly"),
    ('{rating: 3, reason: "partial"}', 3.0, "partial"),
    ("{“rating”: 5, “reason”: “كاملة”}", 5.0, "كاملة"),
    ('{"rating": 4, "reason": "fine", "valid": true, "notes": null}', 4.0, "fine"),
    ('{"score": 2}', 2.0, ""),
    ('```json\n{"rating": 4, "reason": "cut off by max_tokens', 4.0, None),
]


@pytest.mark.parametrize(("reply", "rating", "reason"), RATING_REPLIES)
def test_ratings_survive_malformed_replies(reply: str, rating: float, reason: str | None) -> None:
    if reason is None:  # a truncated reply has no JSON left; the "rating: n" text still counts
        value, _ = parse_rating(reply)
        assert value == rating
        return
    assert parse_rating(reply) == (rating, reason)


@pytest.mark.parametrize(
    ("reply", "rating"),
    [("Rating: 4/5", 4.0), ("التقييم: ٥", 5.0), ("امتیاز: ۲", 2.0), ("3", 3.0), (" 4/5. ", 4.0)],
)
def test_ratings_without_json(reply: str, rating: float) -> None:
    assert parse_rating(reply)[0] == rating


@pytest.mark.parametrize(
    "reply", ["I cannot rate this answer.", "", '{"reason": "no number here"}', "```json\n```"]
)
def test_unusable_ratings_raise(reply: str) -> None:
    with pytest.raises(ParseError):
        parse_rating(reply)


VERDICT_REPLIES = [
    ('{"verdicts": [1, 0, 1], "reason": "x"}', [1, 0, 1]),
    ("[1, 0, 1]", [1, 0, 1]),
    ('```json\n{"verdicts": ["yes", "no", "Yes."]}\n```', [1, 0, 1]),
    (
        '{"verdicts": [{"statement": "a", "verdict": 1}, {"statement": "b", "verdict": 0}, '
        '{"statement": "c", "verdict": "1"}]}',
        [1, 0, 1],
    ),
    ('{"verdicts": [١, ٠, ١]}', [1, 0, 1]),
    ('{"verdicts": [۱، ۰، ۱]}', [1, 0, 1]),
    ('{"verdicts": ["نعم", "لا", "نعم"]}', [1, 0, 1]),
    ('{"verdicts": ["بله", "خیر", "بله"]}', [1, 0, 1]),
    ('{"verdicts": [true, false, true,],}', [1, 0, 1]),
    ("Sure. The verdicts are: {'verdicts': [1, 0, 1, 1]} (the fourth is extra)", [1, 0, 1]),
    ('{"verdicts": [1, 0, 1], "reason": "the [2] claim is not in the context"}', [1, 0, 1]),
]


@pytest.mark.parametrize(("reply", "verdicts"), VERDICT_REPLIES)
def test_verdicts_survive_malformed_replies(reply: str, verdicts: list[int]) -> None:
    assert parse_verdicts(reply, expected=3) == verdicts


def test_too_few_verdicts_is_an_error() -> None:
    with pytest.raises(ParseError, match="2 verdicts for 3"):
        parse_verdicts('{"verdicts": [1, 0]}', expected=3)
    with pytest.raises(ParseError):
        parse_verdicts('{"verdicts": ["maybe", 1, 0]}', expected=3)


def test_statements_from_json_objects_and_bullets() -> None:
    assert parse_statements('{"statements": ["ولد في القاهرة.", "  درس الطب. "]}') == [
        "ولد في القاهرة.",
        "درس الطب.",
    ]
    assert parse_statements('[{"statement": "A"}, {"statement": "B"}]') == ["A", "B"]
    assert parse_statements("Statements:\n1. Paris is the capital.\n2) It is in France.\n- It is big.") == [
        "Paris is the capital.",
        "It is in France.",
        "It is big.",
    ]
    assert parse_statements('{"statements": []}') == []
    with pytest.raises(ParseError):
        parse_statements("I could not find any statements.")


def test_classification() -> None:
    assert parse_classification('{"answer": [1, 0], "reference": [1, 1, 0]}', 2, 3) == ([1, 0], [1, 1, 0])
    assert parse_classification('```\n{"Answer": ["TP", "FP"], "Reference": ["yes"]}\n```', 2, 1) == (
        [1, 0],
        [1],
    )
    with pytest.raises(ParseError):
        parse_classification('{"answer": [1]}', 1, 1)
    with pytest.raises(ParseError):
        parse_classification('{"answer": [1], "reference": []}', 1, 1)


def test_questions_and_queries() -> None:
    questions, noncommittal = parse_questions(
        '{"questions": ["ما عاصمة مصر؟", "أين تقع القاهرة؟"], "noncommittal": ٠}'
    )
    assert questions == ["ما عاصمة مصر؟", "أين تقع القاهرة؟"] and noncommittal is False
    assert parse_questions('{"questions": ["x"], "noncommittal": 1}')[1] is True
    assert parse_queries('{"queries": ["a", "b"]}') == ["a", "b"]
    assert parse_queries("1. first query\n2. second query") == ["first query", "second query"]
    with pytest.raises(ParseError):
        parse_queries('{"queries": []}')


def test_ranking_fills_gaps_and_drops_junk() -> None:
    assert parse_ranking('{"ranking": [3, 1, 2]}', 3) == [2, 0, 1]
    assert parse_ranking("[2] > [3] > [1]", 3) == [1, 2, 0]
    assert parse_ranking('{"ranking": [2, 2, 9, 0]}', 4) == [1, 0, 2, 3]
    assert parse_ranking('{"ranking": ["۲", "۱"]}', 3) == [1, 0, 2]
    with pytest.raises(ParseError):
        parse_ranking("no idea", 3)


def test_scores_clamped() -> None:
    assert parse_score('{"score": 5}', 0, 3) == 3.0
    assert parse_score("Score: ٢", 0, 3) == 2.0
    assert parse_score('{"score": -1}', 0, 3) == 0.0


def test_values() -> None:
    assert normalize_digits("٠١٢٣٤٥٦٧٨٩ ۰۱۲۳۴۵۶۷۸۹ ٣٫٥") == "0123456789 0123456789 3.5"
    assert as_number("4 out of 5", 1, 5) == 4.0
    assert as_number(9, 1, 5) == 5.0
    assert as_verdict({"supported": "no"}) == 0
    assert as_verdict("Yes, the context says so") == 1
    with pytest.raises(ParseError):
        as_number("NaN", 0, 1)
    with pytest.raises(ParseError):
        as_number(None, 0, 1)


def test_extract_json_prefers_fenced_block_and_skips_prose_brackets() -> None:
    reply = 'Passage [1] matters.\n```json\n{"a": 1}\n```'
    assert extract_json(reply) == {"a": 1}
    assert extract_json('See [note] then {"b": [1, 2]} done') == {"b": [1, 2]}
    with pytest.raises(ParseError):
        extract_json("null")
