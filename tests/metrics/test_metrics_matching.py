"""Match modes: what is ranked, in which order, and what counts as relevant."""

from __future__ import annotations

import pytest

from composer.data.ranking import Ranking, ranking_from_hits
from composer.data.types import Corpus, Document, Hit, Question
from composer.evaluation.given import hits_table
from composer.metrics.matching import (
    MatchedRanking,
    chunk_parent,
    default_match_mode,
    match_hits,
    match_ranking,
)
from composer.metrics.retrieval import mrr, recall, relevance
from composer.metrics.textmatch import contains_answer, matches_context


def q(**fields: object) -> Question:
    return Question(id="q1", question="من هو جمال خاشقجي؟", **fields)  # type: ignore[arg-type]


CORPUS = Corpus(
    [
        Document("d1", "جمال خاشقجي صحفي وإعلامي سعودي ولد في المدينة المنورة عام 1958."),
        Document("d2", "المدينة المنورة مدينة في الحجاز، وفيها المسجد النبوي."),
        Document("d3", "صحفي وإعلامي من مصر، عمل في الأهرام."),
        Document("notes#2", "وثيقة يحتوي معرفها على علامة #."),
    ]
)


def ranked(hits: list[Hit], corpus: Corpus | None = None) -> Ranking:
    """One question's hits as the Ranking every run is scored from (trec order, documents resolved; all
    ties too, which a run left to itself would keep in the order given)."""
    run = {"q1": hits}
    return ranking_from_hits(run, ["q1"], hits_table(run, corpus), order="score")


def score(name: str, judged: MatchedRanking, k: int) -> float:
    matrix, counts = relevance([judged.ranked], [judged.relevant])
    return float({"mrr": mrr, "recall": recall}[name](matrix, counts, k)[0])


# trec order ----------------------------------------------------------------------------------------------


def test_rankings_sort_by_score_then_id_descending() -> None:
    hits = [Hit("a", 1.0), Hit("c", 2.0), Hit("b", 1.0), Hit("d", 1.0), Hit("b2", 0.5)]
    assert [h.id for h in ranked(hits).hits(0)] == ["c", "d", "b", "a", "b2"]


def test_rankings_compare_ids_by_code_point_like_strcmp() -> None:
    hits = [Hit("doc-10", 1.0), Hit("doc-9", 1.0), Hit("Doc-99", 1.0), Hit("سند", 1.0)]
    assert [h.id for h in ranked(hits).hits(0)] == ["سند", "doc-9", "doc-10", "Doc-99"]


# document mode -------------------------------------------------------------------------------------------


def test_document_mode_collapses_chunks_to_the_best_rank() -> None:
    hits = [Hit("d1#0", 0.9), Hit("d2#1", 0.8), Hit("d1#3", 0.7), Hit("d3#0", 0.6)]
    judged = match_ranking([q(relevant_ids=("d3",))], ranked(hits), "document")
    assert judged.relevant.tolist() == [[False, False, True, False]]  # d1, d2, d3, then padding
    assert judged.n_relevant.tolist() == [1] and judged.labelled.tolist() == [True]
    assert mrr(judged.relevant, judged.n_relevant, 3).tolist() == pytest.approx([1 / 3])  # rank 4 moved up


def test_document_of_a_hit_prefers_doc_id_then_corpus_id_then_chunk_prefix() -> None:
    hits = [
        Hit("x", 0.9, doc_id="d2"),
        Hit("notes#2", 0.8),
        Hit("d3#7", 0.7),
        Hit("https://site/page#intro", 0.6),
    ]
    table = ranked(hits, CORPUS).table
    assert [table[h.id][0] for h in hits] == ["d2", "notes#2", "d3", "https://site/page#intro"]
    for label, rank in (("d2", 0), ("notes#2", 1), ("d3", 2), ("https://site/page#intro", 3)):
        judged = match_ranking([q(relevant_ids=(label,))], ranked(hits, CORPUS), "document")
        assert judged.relevant[0].tolist().index(True) == rank


def test_chunk_parent_only_strips_a_numeric_suffix() -> None:
    assert chunk_parent("arcd-000-1#12") == "arcd-000-1"
    assert chunk_parent("a#b#3") == "a#b"
    assert chunk_parent("page#intro") == "page#intro"
    assert chunk_parent("#3") == "#3"
    assert chunk_parent("plain") == "plain"


def test_unlabelled_questions_are_not_judged() -> None:
    hits = [Hit("d1", 1.0)]
    assert match_ranking([q()], ranked(hits), "document").labelled.tolist() == [False]
    assert match_ranking([q()], ranked(hits), "chunk").labelled.tolist() == [False]
    assert match_hits(q(relevant_ids=("d1",)), hits, "answer") is None  # no gold answer
    assert match_hits(q(answers=("صحفي",)), hits, "context") is None  # no context, no ids
    assert match_ranking([q(answers=("صحفي",))], ranked(hits), "context").labelled.tolist() == [False]


def test_unknown_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown match mode"):
        match_ranking([q(relevant_ids=("d1",))], ranked([]), "passage")  # type: ignore[arg-type]


# chunk mode ----------------------------------------------------------------------------------------------


def test_chunk_mode_keeps_chunk_ids_and_drops_repeats() -> None:
    hits = [Hit("d1#0", 0.9), Hit("d1#0", 0.5), Hit("d1#1", 0.4)]
    judged = match_ranking([q(relevant_ids=("d1#1",))], ranked(hits), "chunk")
    assert judged.relevant.tolist() == [[False, True, False]]  # the repeat dropped, d1#1 moves up
    assert mrr(judged.relevant, judged.n_relevant, 5).tolist() == [0.5]


# answer mode ---------------------------------------------------------------------------------------------

UNIVERSE = {
    "d1#0": ("d1", "جمال خاشقجي صحفي وإعلامي سعودي"),
    "d1#1": ("d1", "ولد في المدينة المنورة عام 1958."),
    "d2#0": ("d2", "المدينة المنورة مدينة في الحجاز"),
    "d3#0": ("d3", "صحفي وإعلامي من مصر"),
    "d1#2": ("d1", "وعمل صحفيا وإعلاميا في جريدة الوطن"),
}


def test_answer_mode_counts_answer_bearing_chunks_of_relevant_documents() -> None:
    question = q(relevant_ids=("d1",), reference_answer="صحفي وإعلامي")
    hits = [Hit("d3#0", 0.9), Hit("d1#1", 0.8)]  # d3#0 holds the answer but belongs to another document
    judged = match_hits(question, hits, "answer", universe=UNIVERSE)
    assert judged is not None
    assert judged.ranked == ["d3#0", "d1#1"]
    assert judged.relevant == frozenset({"d1#0"})  # known from the universe though not retrieved
    assert score("recall", judged, 10) == 0.0


def test_answer_mode_without_labels_accepts_any_document() -> None:
    question = q(reference_answer="صحفي وإعلامي")
    judged = match_hits(question, [Hit("d3#0", 0.9), Hit("d1#1", 0.8)], "answer", universe=UNIVERSE)
    assert judged is not None
    assert judged.relevant == frozenset({"d1#0", "d3#0"})
    assert score("mrr", judged, 10) == 1.0
    assert score("recall", judged, 10) == 0.5


def test_answer_mode_reads_hit_text_first_and_folds_spelling() -> None:
    question = q(answers=("أحمد",))
    hits = [Hit("x#0", 0.9, text="قال احْمَد ذلك"), Hit("x#1", 0.8, text="قال محمود ذلك")]
    judged = match_hits(question, hits, "answer")
    assert judged is not None
    assert judged.relevant == frozenset({"x#0"})  # no universe, no corpus: the retrieved items only


def test_answer_mode_over_documents_uses_the_corpus_as_collection() -> None:
    question = q(reference_answer="صحفي وإعلامي")
    judged = match_hits(question, [Hit("d2", 0.9), Hit("d3", 0.5)], "answer", corpus=CORPUS)
    assert judged is not None
    assert judged.relevant == frozenset({"d1", "d3"})
    assert score("recall", judged, 2) == 0.5


def test_answer_mode_judges_a_textless_chunk_by_its_document() -> None:
    question = q(relevant_ids=("d1",), reference_answer="1958")
    judged = match_hits(question, [Hit("d1#5", 0.9)], "answer", corpus=CORPUS)
    assert judged is not None
    assert judged.relevant == frozenset({"d1#5"})


def test_answer_containment_folds_scripts_and_guards_numbers() -> None:
    assert contains_answer("ولد في المدينة المنورة", "المدينة المنوره")
    assert contains_answer("به 83 زبان دنیا ترجمه شده‌است", "به ۸۳ زبان دنیا ترجمه شده")
    assert contains_answer("نامه‌ها را فرستاد", "نامهها")  # ZWNJ dropped on both sides
    assert contains_answer("سافر علی إلى بغداد", "علي")  # Persian and Arabic yeh
    assert contains_answer("والكتاب على الطاولة", "كتاب")  # Arabic clitics attach to words
    assert contains_answer("در یک سایت 14 هزار هکتاری", "۱۴ هزار")
    assert not contains_answer("در سال 1400 شمسی", "14")
    assert not contains_answer("عام 19580", "1958")
    assert not contains_answer("any text", " ،")


# context mode --------------------------------------------------------------------------------------------

GOLD = "جمال خاشقجي صحفي وإعلامي سعودي ولد في المدينة المنورة"  # 9 tokens


def test_context_matches_on_jaccard_threshold_or_containment() -> None:
    seven_shared = "جمال خاشقجي صحفي وإعلامي سعودي ولد في الرياض"  # 7 shared / 10 = 0.7
    six_shared = "جمال خاشقجي صحفي وإعلامي سعودي ولد الرياض والقاهرة"  # 6 shared / 11 = 0.545
    assert matches_context(seven_shared, GOLD)
    assert not matches_context(six_shared, GOLD)
    assert matches_context("صحفي وإعلامي سعودي", GOLD)  # passage inside the gold context
    assert matches_context("مقدمة. " + GOLD + " وقصص أخرى كثيرة جدا جدا جدا", GOLD)  # and the reverse
    assert not matches_context("", GOLD)


def test_context_mode_gives_each_gold_context_one_key() -> None:
    other_gold = "المسجد النبوي في المدينة المنورة"
    question = q(context=(GOLD, other_gold))
    hits = [
        Hit("c9", 0.9, text="نص لا علاقة له بالسؤال"),
        Hit("c1", 0.8, text="صحفي وإعلامي سعودي"),
        Hit("c2", 0.7, text=GOLD),  # the same gold context again: collapsed
        Hit("c3", 0.6, text="المسجد النبوي في المدينة المنورة"),
    ]
    judged = match_hits(question, hits, "context")
    assert judged is not None
    assert judged.ranked == ["c9", "ctx:0", "ctx:1"]
    assert judged.scores == [0.9, 0.8, 0.6]
    assert judged.relevant == frozenset({"ctx:0", "ctx:1"})
    assert score("recall", judged, 3) == 1.0


def test_context_mode_id_match_stands_for_the_first_context_not_yet_found() -> None:
    question = q(relevant_ids=("c7",), context=(GOLD, "نص ذهبي آخر تماما"))
    hits = [Hit("c1", 0.9, text=GOLD), Hit("c7", 0.8, text="نص مختلف"), Hit("c8", 0.7, text="غير ذي صلة")]
    judged = match_hits(question, hits, "context")
    assert judged is not None
    assert judged.ranked == ["ctx:0", "ctx:1", "c8"]
    assert score("recall", judged, 2) == 1.0


def test_context_mode_with_ids_only_judges_like_chunk_mode() -> None:
    judged = match_hits(q(relevant_ids=("c2",)), [Hit("c1", 0.9), Hit("c2", 0.8)], "context")
    assert judged is not None
    assert judged.ranked == ["c1", "c2"]
    assert judged.relevant == frozenset({"c2"})


def test_context_mode_reads_text_from_the_universe() -> None:
    question = q(context=("المدينة المنورة مدينة في الحجاز",))
    judged = match_hits(question, [Hit("d2#0", 0.5)], "context", universe=UNIVERSE)
    assert judged is not None
    assert judged.ranked == ["ctx:0"]


# default mode --------------------------------------------------------------------------------------------


def test_default_match_mode_follows_the_labels() -> None:
    assert default_match_mode([q(relevant_ids=("d1",))], CORPUS) == "document"
    assert default_match_mode([q(relevant_ids=("d1",))]) == "document"
    assert default_match_mode([q(relevant_ids=("d1#0",)), q(relevant_ids=("d1#3",))], CORPUS) == "chunk"
    assert default_match_mode([q(relevant_ids=("d1#0",))]) == "chunk"
    assert default_match_mode([q(relevant_ids=("notes#2",))], CORPUS) == "document"
    assert default_match_mode([q(context=("نص",), answers=("ج",))], CORPUS) == "context"
    assert default_match_mode([q(reference_answer="ج")], CORPUS) == "answer"
    assert default_match_mode([q()]) == "document"
