"""`composer synth --conversations`: multi-turn sets in the one-conversation-per-line format, written from
a corpus against the scripted LLM server: follow-ups labelled with their passage and gold standalone
rewrite, self-contained follow-ups dropped, every language, the cache and the request counts."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import ChatRequest, FakeLLMServer, Reply
from scripted_synth import _PASSAGE, ScriptedSynth, _lead_and_answer
from typer.testing import CliRunner

from composer.cli.app import app
from composer.data import load_corpus, load_questions
from composer.data.types import Corpus, Document
from composer.llm import LLMClient, LLMConfig
from composer.llm.preflight import PING
from composer.synth import SynthConfig, synthesize
from composer.synth.filters import leans_on
from composer.synth.prompts import CONVERSATION
from composer.synth.replies import parse_conversation

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arcd-sample" / "corpus.jsonl"
PERSIAN = Document(
    "fa-tehran",
    "تهران پایتخت ایران و بزرگ‌ترین شهر این کشور است. این شهر در دامنهٔ جنوبی رشته‌کوه البرز قرار دارد و "
    "آقامحمدخان قاجار آن را در سال ۱۱۶۵ خورشیدی پایتخت کرد. برج میلاد و برج آزادی از نمادهای "
    "شناخته‌شدهٔ تهران هستند.",
    "تهران",
)
ENGLISH = Document(
    "en-nile",
    "The Nile is a major north-flowing river in northeastern Africa. It flows into the Mediterranean Sea "
    "and is about 6,650 kilometres long. Its two main tributaries, the White Nile and the Blue Nile, meet "
    "at Khartoum in Sudan.",
    "Nile",
)
# (first question, follow-up) per language: the follow-up names neither the subject nor "speaking of".
_TALK = {
    "ar": ("ما الذي يرد بعد «{lead}» في الحديث عن {topic}؟", "وماذا يرد بعد «{lead}»؟"),
    "fa": ("پس از «{lead}» دربارهٔ {topic} چه آمده است؟", "و پس از «{lead}» چه؟"),
    "en": ("What comes after “{lead}” when speaking of {topic}?", "And what comes after “{lead}”?"),
}


class ScriptedConversations(ScriptedSynth):
    """ScriptedSynth that also writes conversations: the first question and its rewrites name the
    document's title, the follow-ups do not (unless the document is told ``self_contained``)."""

    def __call__(self, req: ChatRequest) -> Reply | str:
        heads = {lg: t.system.split("$")[0] for lg, t in CONVERSATION.items()}  # before $follow_ups
        lang = next((lg for lg, head in heads.items() if req.system.startswith(head)), None)
        if req.messages == PING or lang is None:
            return super().__call__(req)
        self.seen.append(("conversation", lang))
        passage = _PASSAGE.findall(req.prompt)[0]
        doc = self.doc_of(passage)
        visit = req.prompt.count("\n- ")
        first, follow = _TALK[lang]
        turns: list[dict[str, str]] = []
        for i in range(3):
            lead, answer = _lead_and_answer(passage, visit + 2 * i)
            standalone = first.format(lead=lead, topic=doc.title)
            text = standalone if i == 0 or self.has(doc, "self_contained") else follow.format(lead=lead)
            self.questions[standalone] = doc.id  # the checks are asked of the standalone form
            turns.append({"question": text, "answer": answer, **({"standalone": standalone} if i else {})})
        return json.dumps({"turns": turns}, ensure_ascii=False)


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("synth-talk") / "corpus.jsonl"
    head = EXAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)[:12]
    path.write_text("".join(head), encoding="utf-8")
    return path


@pytest.fixture()
def route(corpus_file: Path) -> ScriptedConversations:
    return ScriptedConversations([*load_corpus(corpus_file), PERSIAN, ENGLISH])


@pytest.fixture()
def server(route: ScriptedConversations) -> Iterator[FakeLLMServer]:
    with FakeLLMServer(route) as srv:
        yield srv


def synth_cli(server: FakeLLMServer, corpus: Path, tmp_path: Path, *extra: str) -> Any:
    args = ["synth", str(corpus), "--conversations", "2", "--llm", "openai/writer", "--llm-base", server.url,
            "--out", str(tmp_path / "talk.jsonl"), "--workdir", str(tmp_path / "work"), "--retries", "1",
            *extra]
    return CliRunner().invoke(app, args, env={"COLUMNS": "240"})


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_two_conversations_are_written_one_per_line_with_labelled_follow_ups(
    server: FakeLLMServer, route: ScriptedConversations, corpus_file: Path, tmp_path: Path
) -> None:
    result = synth_cli(server, corpus_file, tmp_path, "--review")
    assert result.exit_code == 0, result.output
    assert "kept 2 of 2 conversations" in result.output and "(4 follow-ups)" in result.output
    assert "generated conversations" in result.output  # the review table
    rows = lines(tmp_path / "talk.jsonl")
    texts = {d.id: d.text for d in load_corpus(corpus_file)}
    assert len(rows) == 2 and len({r["id"] for r in rows}) == 2
    for row in rows:
        assert set(row) == {"id", "turns", "metadata"} and row["metadata"]["kind"] == "conversation"
        turns = row["turns"]
        assert [t["role"] for t in turns] == ["user", "assistant", "user", "assistant", "user"]
        users = [t for t in turns if t["role"] == "user"]
        assert "standalone" not in users[0]
        for turn in users:
            (doc,) = turn["relevant_ids"]
            assert turn["reference_answer"] in texts[doc] and turn["answers"] == [turn["reference_answer"]]
        for earlier, turn in itertools.pairwise(users):
            title = route.doc_of(texts[turn["relevant_ids"][0]]).title
            assert title in turn["standalone"] and title not in turn["text"]  # it leans on the first
            assert turn["standalone"] != turn["text"] and earlier["text"] != turn["text"]
    questions = load_questions(tmp_path / "talk.jsonl", corpus=load_corpus(corpus_file), strict=True)
    assert len(questions) == 6 and sum(q.is_follow_up and q.standalone is not None for q in questions) == 4
    assert {"conversation"} == {name for name, _ in route.seen if name not in ("supported", "closed_book")}
    report = json.loads((tmp_path / "talk.report.json").read_text(encoding="utf-8"))
    assert report["kept"] == 2 and report["turns"]["kept"] == 6 and report["turns"]["follow_ups"] == 4
    ended = report["by_kind"]["conversation"]["dropped"]
    assert report["generated"] == 2 + sum(ended.values()) <= 2 + sum(report["dropped"].values())
    # the preflight's test request apart; every generation and check under "synth", as the server saw them
    by_purpose = report["llm_by_purpose"]
    assert by_purpose["preflight"]["llm_requests"] == 1
    assert by_purpose["synth"]["llm_requests"] == report["llm"]["llm_requests"] == server.chat_requests
    filtered = report["filters"]
    checks = filtered["unsupported"]["checked"] + filtered["answerable_without_passage"]["checked"]
    assert report["llm"]["llm_requests"] == report["generated"] + checks  # a call a conversation, then checks
    assert report["filters"]["unsupported"]["checked"] >= 6


def test_a_rerun_sends_no_request(server: FakeLLMServer, corpus_file: Path, tmp_path: Path) -> None:
    assert synth_cli(server, corpus_file, tmp_path).exit_code == 0
    first, sent = (tmp_path / "talk.jsonl").read_bytes(), server.chat_requests
    again = synth_cli(server, corpus_file, tmp_path, "--json")
    assert again.exit_code == 0, again.output
    report = json.loads(again.stdout)
    assert server.chat_requests == sent and report["llm"]["llm_requests"] == 0
    assert report["llm"]["llm_cached_calls"] == report["llm"]["llm_calls"] > 0
    assert (tmp_path / "talk.jsonl").read_bytes() == first


def config(server: FakeLLMServer, **fields: Any) -> SynthConfig:
    llm = LLMConfig(model="openai/writer", api_base=server.url, timeout=5.0, max_retries=1)
    return SynthConfig(llm=llm, **{"conversations": 2, **fields})


def test_each_language_gets_its_own_prompt_and_persian_letters(
    server: FakeLLMServer, route: ScriptedConversations, tmp_path: Path
) -> None:
    corpus = Corpus([PERSIAN, ENGLISH])
    client = LLMClient(config(server).llm, cache_dir=tmp_path)
    outcome = synthesize(corpus, config(server, follow_ups=1), client)
    assert {r["metadata"]["lang"] for r in outcome.rows} == {"fa", "en"}
    assert {lang for name, lang in route.seen if name == "conversation"} == {"fa", "en"}
    persian = next(r for r in outcome.rows if r["metadata"]["lang"] == "fa")
    assert [t["role"] for t in persian["turns"]] == ["user", "assistant", "user"]
    assert "تهران" in persian["turns"][2]["standalone"] and "ي" not in json.dumps(persian, ensure_ascii=False)


def test_a_self_contained_follow_up_is_dropped_and_counted(
    server: FakeLLMServer, route: ScriptedConversations, tmp_path: Path
) -> None:
    route.behaviors = {"fa-tehran": {"self_contained"}}
    corpus = Corpus([PERSIAN, ENGLISH])
    client = LLMClient(config(server).llm, cache_dir=tmp_path)
    outcome = synthesize(corpus, config(server, max_attempts=1.0), client)
    report = outcome.report
    assert [r["metadata"]["lang"] for r in outcome.rows] == ["en"] and report["shortfall"] == 1
    ended = report["by_kind"]["conversation"]["dropped"]
    assert report["dropped"]["self_contained"] == 1 == ended["self_contained"]
    assert report["filters"]["self_contained"] == {"checked": 3, "dropped": 1, "kept_share": 0.6667}


def test_leans_on_needs_a_word_of_the_earlier_turns_that_the_follow_up_leaves_out() -> None:
    first = ["من هو جمال خاشقجي؟"]
    assert leans_on("ومتى توفي؟", "متى توفي جمال خاشقجي؟", first, "ar")
    assert not leans_on("متى توفي جمال خاشقجي؟", "متى توفي جمال خاشقجي؟", first, "ar")  # repeats the entity
    assert not leans_on("ما عاصمة مصر؟", "ما عاصمة مصر؟", first, "ar")  # takes nothing from the history
    who = ["Who is Jamal Khashoggi?"]
    assert leans_on("And when did he die?", "When did Jamal Khashoggi die?", who, "en")


def test_a_conversation_reply_needs_a_follow_up_with_its_rewrite() -> None:
    one = json.dumps({"turns": [{"question": "q", "answer": "a"}]})
    bare = json.dumps({"turns": [{"question": "q", "answer": "a"}, {"question": "and?", "answer": "b"}]})
    follow = {"question": "f", "answer": "b", "standalone": "s"}
    good = json.dumps({"turns": [{"question": "q", "answer": "a"}, follow, follow, follow]})
    for reply in (one, bare, "no json"):
        with pytest.raises(ValueError):
            parse_conversation(reply, 2)
    assert parse_conversation(good, 2) == [("q", "a", None), ("f", "b", "s"), ("f", "b", "s")]


def test_a_question_set_keeps_its_fingerprint_and_conversations_change_it(server: FakeLLMServer) -> None:
    base = config(server, conversations=0)
    assert config(server).fingerprint() != base.fingerprint()
    assert config(server, follow_ups=3).fingerprint() != config(server).fingerprint()
    assert config(server, conversations=0, follow_ups=3).fingerprint() == base.fingerprint()
