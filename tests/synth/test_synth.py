"""`composer synth` generation against the local OpenAI-compatible server: kinds, languages, filters,
faults, the seeded cache replay and the cached set an experiment uses."""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import FakeLLMServer, hang, malformed, rate_limited, server_error
from scripted_synth import ScriptedSynth

from composer.data import load_corpus, load_questions
from composer.data.types import Corpus, Document
from composer.errors import ComposerError, InputError
from composer.llm import LLMClient, LLMConfig
from composer.synth import REASONS, SynthConfig, cache_path, require_questions, synthesize, synthesize_cached
from composer.synth.engine import SynthOutcome

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arcd-sample" / "corpus.jsonl"

PERSIAN = [
    Document(
        "fa-tehran",
        "تهران پایتخت ایران و بزرگ‌ترین شهر این کشور است. این شهر در دامنهٔ جنوبی رشته‌کوه البرز "
        "قرار دارد و آقامحمدخان قاجار آن را در سال ۱۱۶۵ خورشیدی پایتخت کرد. برج میلاد و برج آزادی از "
        "نمادهای شناخته‌شدهٔ تهران هستند.",
        "تهران",
    ),
    Document(
        "fa-isfahan",
        "اصفهان یکی از شهرهای تاریخی ایران است که در دوران صفویه پایتخت بود. میدان نقش جهان، "
        "که در فهرست میراث جهانی یونسکو ثبت شده است، در مرکز این شهر قرار دارد. رودخانهٔ زاینده‌رود از "
        "میان اصفهان می‌گذرد و پل خواجو بر روی آن ساخته شده است.",
        "اصفهان",
    ),
    Document(
        "fa-hafez",
        "خواجه شمس‌الدین محمد حافظ شیرازی از بزرگ‌ترین شاعران زبان فارسی است. دیوان او بیشتر از "
        "غزل تشکیل شده و آرامگاهش در شهر شیراز، در باغی به نام حافظیه، قرار دارد. بسیاری از ایرانیان در "
        "شب یلدا با دیوان حافظ فال می‌گیرند.",
        "حافظ",
    ),
    Document(
        "fa-shiraz",
        "شیراز مرکز استان فارس است و به شهر شعر و ادب شهرت دارد. آرامگاه حافظ و سعدی در این "
        "شهر قرار دارد. تخت جمشید، پایتخت تشریفاتی هخامنشیان، در نزدیکی شیراز واقع شده و هر سال "
        "گردشگران بسیاری از آن دیدن می‌کنند.",
        "شیراز",
    ),
]
ENGLISH = [
    Document(
        "en-nile",
        "The Nile is a major north-flowing river in northeastern Africa. It flows into the "
        "Mediterranean Sea and is about 6,650 kilometres long. Its two main tributaries, the White Nile "
        "and the Blue Nile, meet at Khartoum in Sudan.",
        "Nile",
    ),
    Document(
        "en-khartoum",
        "Khartoum is the capital of Sudan. It is located at the confluence of the White "
        "Nile and the Blue Nile, a place known as al-Mogran. The city was founded in 1821 as an outpost "
        "for the Egyptian army.",
        "Khartoum",
    ),
    Document(
        "en-aswan",
        "The Aswan High Dam is an embankment dam built across the Nile in Aswan, Egypt, "
        "between 1960 and 1970. Its reservoir, Lake Nasser, is one of the largest man-made lakes in the "
        "world. The dam controls the annual flooding of the Nile.",
        "Aswan Dam",
    ),
]


@pytest.fixture(scope="module")
def arabic() -> Corpus:
    """Twenty ARCD paragraphs from the bundled sample: several share a subject, so pairs exist."""
    return Corpus(load_corpus(EXAMPLE).documents[:20], str(EXAMPLE))


@pytest.fixture()
def route(arabic: Corpus) -> ScriptedSynth:
    return ScriptedSynth([*arabic, *PERSIAN, *ENGLISH])


@pytest.fixture()
def server(route: ScriptedSynth) -> Iterator[FakeLLMServer]:
    with FakeLLMServer(route) as srv:
        yield srv


def settings(server: FakeLLMServer, n: int, **overrides: Any) -> SynthConfig:
    llm = LLMConfig.model_validate(
        {
            "model": "openai/writer",
            "api_base": server.url,
            "timeout": 5.0,
            "max_retries": 1,
            "backoff_base": 0.01,
            "backoff_max": 0.05,
            **overrides.pop("llm", {}),
        }
    )
    return SynthConfig(n=n, llm=llm, **overrides)


def run(corpus: Corpus, config: SynthConfig, cache: Path) -> SynthOutcome:
    return synthesize(corpus, config, LLMClient(config.llm, cache_dir=cache))


def consistent(report: dict[str, Any]) -> None:
    """Every generated question is kept, surplus or dropped for exactly one counted reason."""
    assert sum(report["dropped"].values()) + report["passed_filters"] == report["generated"]
    assert report["kept"] + report["surplus"] == report["passed_filters"]
    assert report["kept"] + report["shortfall"] == report["n"]
    for reason, counts in report["filters"].items():
        if reason != "check_failed":  # two checks may fail per question; each is a call
            assert counts["dropped"] == report["dropped"][reason]


def test_every_kind_is_generated_with_its_gold(
    arabic: Corpus, server: FakeLLMServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    outcome = run(arabic, settings(server, 10), tmp_path)
    report, rows = outcome.report, outcome.rows
    consistent(report)
    assert report["kept"] == 10 and report["shortfall"] == 0
    kinds = Counter(r["metadata"]["kind"] for r in rows)
    assert kinds == {"factoid": 4, "conceptual": 3, "multi_hop": 2, "unanswerable": 1}
    assert len({r["id"] for r in rows}) == 10
    docs = {d.id: d.text for d in arabic}
    for row in rows:
        meta = row["metadata"]
        assert meta["lang"] == "ar" and meta["generator"] == "openai/writer" and meta["seed"] == 0
        passages = [docs[s["doc_id"]][s["start"] : s["end"]] for s in meta["spans"]]
        if meta["kind"] != "unanswerable":
            assert row["context"] == passages  # the gold context spans, exact
        if meta["kind"] in ("factoid", "multi_hop"):
            where = meta["answer_span"]
            assert docs[where["doc_id"]][where["start"] : where["end"]] == row["reference_answer"]
            start = meta["answer_start"]
            assert (
                row["context"][meta["answer_context"]][start : start + len(row["reference_answer"])]
                == row["reference_answer"]
            )
        if meta["kind"] == "multi_hop":
            assert len(row["relevant_ids"]) == 2 and len(row["context"]) == 2
        if meta["kind"] == "unanswerable":  # no gold at all: refusal metrics score it, retrieval skips it
            assert row["relevant_ids"] == [] and row["reference_answer"] is None and row["answers"] == []
            assert row["context"] == [] and meta["source_doc_ids"]
        else:
            assert row["relevant_ids"] == meta["source_doc_ids"] and row["answers"] == [
                row["reference_answer"]
            ]
    with caplog.at_level(logging.WARNING):
        loaded = load_questions(rows, corpus=arabic, strict=True)
    assert not caplog.records and len(loaded) == 10
    assert report["passages"]["documents_asked"] >= 8  # stratified: many documents, not one
    assert (
        report["llm"]["llm_requests"] == server.chat_requests and report["error_rates"]["failed_calls"] == 0
    )


def test_each_passage_is_asked_about_in_its_own_language(
    route: ScriptedSynth, server: FakeLLMServer, arabic: Corpus, tmp_path: Path
) -> None:
    corpus = Corpus([*arabic.documents[:4], *PERSIAN, *ENGLISH])
    route.behaviors = {"fa-isfahan": {"arabic_letters"}}
    outcome = run(corpus, settings(server, 9, mix={"factoid": 1, "conceptual": 1}), tmp_path)
    by_doc_lang = {
        d.id: lang
        for lang, docs in (("ar", arabic.documents[:4]), ("fa", PERSIAN), ("en", ENGLISH))
        for d in docs
    }
    for row in outcome.rows:
        assert row["metadata"]["lang"] == by_doc_lang[row["metadata"]["source_doc_ids"][0]]
    langs = Counter(r["metadata"]["lang"] for r in outcome.rows)
    assert set(langs) == {"ar", "fa", "en"}
    prompt_langs = {lang for name, lang in route.seen}
    assert prompt_langs == {"ar", "fa", "en"}
    for row in outcome.rows:
        if row["metadata"]["lang"] == "fa":  # Persian letters, even where the model slipped into Arabic ones
            assert not set("يك") & set(row["question"] + row["reference_answer"])
    for lang in ("ar", "fa", "en"):  # the checks are asked in the passage's language too
        assert {"supported", "closed_book"} <= {name for name, used in route.seen if used == lang}


@pytest.mark.parametrize(
    ("behavior", "reason", "mix"),
    [
        ("malformed", "llm_failed", {"factoid": 1}),
        ("english", "language", {"factoid": 1}),
        ("long_question", "length", {"conceptual": 1}),
        ("answer_not_in_passage", "span_not_found", {"factoid": 1}),
        ("answer_in_question", "answer_in_question", {"factoid": 1}),
        ("same_question", "near_duplicate", {"factoid": 1}),
        ("unsupported", "unsupported", {"factoid": 1}),
        ("answered", "answered_by_passage", {"unanswerable": 1}),
        ("closed_book", "answerable_without_passage", {"factoid": 1}),
        ("check_garbage", "check_failed", {"conceptual": 1}),
    ],
)
def test_every_filter_fires_and_is_counted(
    behavior: str,
    reason: str,
    mix: dict[str, float],
    route: ScriptedSynth,
    server: FakeLLMServer,
    arabic: Corpus,
    tmp_path: Path,
) -> None:
    corpus = Corpus(arabic.documents[:6])
    route.behaviors = {d.id: {behavior} for d in corpus}
    outcome = run(corpus, settings(server, 3, mix=mix), tmp_path)
    report = outcome.report
    consistent(report)
    assert report["dropped"][reason] > 0
    # ARCD repeats paragraphs (one doc is another plus a sentence): their questions may repeat too.
    assert {r for r, n in report["dropped"].items() if n} <= {reason, "near_duplicate"}
    if reason == "near_duplicate":  # the first of the identical questions is kept
        assert report["kept"] == 1 and report["shortfall"] == 2
    else:  # nothing survives: the whole budget is spent and the shortfall is reported
        assert report["dropped"][reason] > report["generated"] / 2
        assert report["kept"] == 0 and report["generated"] == report["attempt_budget"] == 9
    if reason in ("llm_failed", "check_failed"):  # unusable replies: retried, then failed calls by kind
        assert report["error_rates"]["kinds"]["bad_response"]["failed_calls"] > 0
        assert (
            report["error_rates"]["kinds"]["bad_response"]["failed_requests"]
            == 2 * report["error_rates"]["kinds"]["bad_response"]["failed_calls"]
        )
    assert set(report["dropped"]) == set(REASONS)


def test_rate_limits_server_errors_timeouts_and_malformed_bodies_are_retried(
    arabic: Corpus, server: FakeLLMServer, tmp_path: Path
) -> None:
    server.enqueue(rate_limited(0.2), server_error(500), hang(1.5), malformed())
    config = settings(server, 4, llm={"timeout": 0.5, "max_retries": 3})
    outcome = run(arabic, config, tmp_path)
    report = outcome.report
    assert report["kept"] == 4 and report["dropped"]["llm_failed"] == 0
    rates = report["error_rates"]
    assert rates["failed_calls"] == 0 and rates["failed_requests"] == 4
    assert {k: v["failed_requests"] for k, v in rates["kinds"].items() if v["failed_requests"]} == {
        "rate_limit": 1,
        "server_error": 1,
        "timeout": 1,
        "bad_response": 1,
    }
    assert server.statuses.count(429) == 1 and server.statuses.count(500) == 1


def test_a_dead_provider_is_counted_and_reported_not_raised(
    arabic: Corpus, server: FakeLLMServer, route: ScriptedSynth, tmp_path: Path
) -> None:
    server.route = lambda req: server_error(503)
    outcome = run(arabic, settings(server, 3), tmp_path)
    report = outcome.report
    assert outcome.rows == [] and report["dropped"]["llm_failed"] == report["generated"] == 9
    assert report["error_rates"]["kinds"]["server_error"]["failed_calls"] == 9
    with pytest.raises(ComposerError, match=r"no question was kept.*llm_failed 9.*server_error 9"):
        require_questions(outcome)


def test_a_seeded_rerun_sends_no_request_and_another_seed_draws_another_sample(
    arabic: Corpus, server: FakeLLMServer, tmp_path: Path
) -> None:
    config = settings(server, 8)
    first = run(arabic, config, tmp_path)
    sent = server.chat_requests
    assert sent > 0
    again = run(arabic, config, tmp_path)  # a fresh client on the same reply cache, as a new process has
    assert server.chat_requests == sent
    assert again.rows == first.rows
    assert (
        again.report["llm"]["llm_cached_calls"]
        == again.report["llm"]["llm_calls"]
        == first.report["llm"]["llm_calls"]
    )
    other = run(arabic, settings(server, 8, seed=1), tmp_path)
    assert server.chat_requests > sent
    assert {r["id"] for r in other.rows}.isdisjoint({r["id"] for r in first.rows})
    drawn = [r["metadata"]["spans"][0]["doc_id"] for r in first.rows]
    assert [r["metadata"]["spans"][0]["doc_id"] for r in other.rows] != drawn


def test_concurrency_stays_within_its_bound(arabic: Corpus, server: FakeLLMServer, tmp_path: Path) -> None:
    server.latency = 0.05
    run(arabic, settings(server, 8, llm={"max_concurrency": 3}), tmp_path)
    assert 1 < server.max_in_flight <= 3


def test_no_passage_long_enough_is_a_located_error(server: FakeLLMServer, tmp_path: Path) -> None:
    corpus = Corpus([Document("d", "Too short.")], "tiny.jsonl")
    with pytest.raises(InputError, match=r"tiny\.jsonl: no document has a passage of at least 150"):
        run(corpus, settings(server, 3), tmp_path)


def test_an_experiment_set_is_generated_once_and_cached_by_corpus_and_settings(
    arabic: Corpus, server: FakeLLMServer, tmp_path: Path
) -> None:
    config = settings(server, 6)
    questions = synthesize_cached(arabic, config, tmp_path)
    path = cache_path(arabic, config, tmp_path)
    assert path.parent == tmp_path / "cache" / "synth" and path.exists()
    report = json.loads(path.with_suffix(".report.json").read_text(encoding="utf-8"))
    assert report["kept"] == len(questions) == 6
    sent = server.chat_requests
    (tmp_path / "cache" / "llm").rename(tmp_path / "gone")  # the set itself is the cache: no reply needed
    assert [q.id for q in synthesize_cached(arabic, config, tmp_path)] == [q.id for q in questions]
    assert server.chat_requests == sent
    smaller = Corpus(arabic.documents[:12], arabic.source)
    assert cache_path(smaller, config, tmp_path) != path
    assert cache_path(arabic, settings(server, 6, seed=3), tmp_path) != path
