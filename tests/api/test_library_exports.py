"""The third round's library findings: an exported winner answers with the LLM settings its trial used,
``evaluate`` takes LangChain and LlamaIndex retrievers as they are, a flat space, ``optimize`` without a
corpus and in the API's words, and ``load_pipeline``'s work dir beside its config."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import ChatRequest, FakeLLMServer
from sample_study import SAMPLE, sample_corpus, sample_questions
from scripted_llm import ScriptedRAG, kind_of
from typer.testing import CliRunner

import composer
from composer.cli.app import app
from composer.data.types import Corpus, QuestionSet

N_QUESTIONS = 6


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return sample_corpus()


@pytest.fixture(scope="module")
def questions(corpus: Corpus) -> QuestionSet:
    return sample_questions(corpus, N_QUESTIONS)


# -- the export carries every setting that shapes an LLM request -----------------------------------------


class Recorded:
    """The scripted RAG LLM, keeping every request it is sent."""

    def __init__(self, route: ScriptedRAG) -> None:
        self.route = route
        self.requests: list[ChatRequest] = []

    def __call__(self, req: ChatRequest) -> Any:
        self.requests.append(req)
        return self.route(req)

    def since(self, n: int) -> list[ChatRequest]:
        """The requests after the first ``n``, pings (every run's reachability test) left out."""
        return [r for r in self.requests[n:] if kind_of(r) != "ping"]


@pytest.fixture(scope="module")
def recorded() -> Iterator[tuple[FakeLLMServer, Recorded]]:
    lines = (SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()[:N_QUESTIONS]
    golds = {json.loads(line)["question"]: json.loads(line)["answers"][0] for line in lines}
    route = Recorded(ScriptedRAG(golds))
    with FakeLLMServer(route) as srv:
        yield srv, route


@pytest.mark.slow
def test_an_exported_winner_sends_the_trials_llm_settings_and_hits_its_cache(
    recorded: tuple[FakeLLMServer, Recorded], tmp_path: Path
) -> None:
    server, route = recorded
    lines = (SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()[:N_QUESTIONS]
    (tmp_path / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    work = tmp_path / "work"
    result = composer.optimize(
        {
            "search_space": {
                "defaults": {"retrieval": {"mode": "bm25"}},
                "dimensions": {"retrieval.k": {"choices": [3, 5]}},
            },
            "sampler": {"name": "grid", "seed": None},
            "pruner": "none",
            "objective": {"k": 3, "metrics": {"recall": 1, "answer_correctness": 1}},
        },
        questions=tmp_path / "questions.jsonl",
        corpus=SAMPLE / "corpus.jsonl",
        n_trials=2,
        workdir=work,
        name="llm-settings",
        llm={"model": "openai/fake", "api_base": server.url, "max_tokens": 200,
             "params": {"top_p": 0.3, "seed": 11}, "timeout": 5.0, "max_retries": 0},
        judge={"metrics": ["answer_correctness"]},
    )
    assert result.best_config is not None
    assert result.best_config["generation"]["max_tokens"] == 200
    study_requests = route.since(0)
    generated = [r for r in study_requests if kind_of(r) == "generate"]
    assert generated and all(
        (r.body.get("max_tokens"), r.body.get("top_p"), r.body.get("seed")) == (200, 0.3, 11)
        for r in generated
    )
    best = tmp_path / "best.yaml"
    storage = result.storage
    exported = CliRunner().invoke(app, ["export", "llm-settings", "--storage", storage, "--out", str(best)])
    assert exported.exit_code == 0, exported.output
    generation = composer.load_pipeline(best, workdir=work).config.generation
    assert (generation.max_tokens, generation.params, generation.api_base) == (
        200, {"top_p": 0.3, "seed": 11}, server.url)
    # The command the export offers to reproduce the scores: every request is one the study cached.
    before = len(route.requests)
    evaluated = CliRunner().invoke(app, [
        "eval", str(tmp_path / "questions.jsonl"), "--corpus", str(SAMPLE / "corpus.jsonl"), "--config",
        str(best), "--split", "selection", "--workdir", str(work), "--metrics", "answer_correctness",
        "--json",
    ])
    assert evaluated.exit_code == 0, evaluated.output
    assert route.since(before) == []
    # load_pipeline(best.yaml).ask sends the same settings (from another work dir: no cache to hit).
    before = len(route.requests)
    pipe = composer.load_pipeline(best, SAMPLE / "corpus.jsonl", workdir=tmp_path / "elsewhere")
    pipe.ask(_question(lines[0]))
    asked = [r for r in route.since(before) if kind_of(r) == "generate"]
    assert len(asked) == 1
    assert (asked[0].body.get("max_tokens"), asked[0].body.get("top_p"), asked[0].body.get("seed")) == (
        200, 0.3, 11)


def _question(line: str) -> str:
    return str(json.loads(line)["question"])


# -- LangChain and LlamaIndex retrievers as they are ------------------------------------------------------


def _ranked(corpus: Corpus) -> Any:
    """A small ranking of the sample corpus (bm25s), as (id, text, score) per question."""
    import bm25s

    ids, texts = [d.id for d in corpus], [d.text for d in corpus]
    model = bm25s.BM25()
    model.index(bm25s.tokenize(texts, show_progress=False), show_progress=False)

    def ranked(question: str) -> list[tuple[str, str, float]]:
        found, scores = model.retrieve(bm25s.tokenize([question], show_progress=False), k=10,
                                       show_progress=False)
        pairs = zip(found[0].tolist(), scores[0].tolist(), strict=True)
        return [(ids[i], texts[i], float(s)) for i, s in pairs]

    return ranked


def test_langchain_retrievers_and_runnables_and_llamaindex_retrievers_are_evaluated_as_they_are(
    corpus: Corpus, questions: QuestionSet, tmp_path: Path
) -> None:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableLambda

    ranked = _ranked(corpus)

    class Bm25Retriever(BaseRetriever):  # a real LangChain retriever: asked through .invoke
        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            return [Document(page_content=text, metadata={"source": doc_id, "score": score})
                    for doc_id, text, score in ranked(query)]

    # LlamaIndex is not installed (a heavy package): its retriever's shape, duck-typed as Composer reads it:
    # retrieve(question) -> [NodeWithScore(node=TextNode, score)], the node's get_content(), node_id and
    # ref_doc_id (the document it was cut from).
    class TextNode:
        def __init__(self, doc_id: str, text: str) -> None:
            self.node_id, self.ref_doc_id, self._text = f"{doc_id}#node", doc_id, text
            self.metadata: dict[str, Any] = {}

        def get_content(self) -> str:
            return self._text

    class NodeWithScore:
        def __init__(self, node: TextNode, score: float) -> None:
            self.node, self.score = node, score

    class LlamaRetriever:
        def retrieve(self, question: str) -> list[NodeWithScore]:
            return [NodeWithScore(TextNode(d, t), s) for d, t, s in ranked(question)]

    def plain(question: str) -> list[dict[str, Any]]:
        return [{"id": d, "text": t, "score": s} for d, t, s in ranked(question)]

    expected = composer.evaluate(plain, questions, corpus, workdir=tmp_path).means()
    runnable = RunnableLambda(lambda q: [Document(page_content=t, id=d) for d, t, _ in ranked(q)])
    for system in (Bm25Retriever(), runnable, LlamaRetriever()):
        means = composer.evaluate(system, questions, corpus, workdir=tmp_path).means()
        assert means["ndcg@10"] == pytest.approx(expected["ndcg@10"], abs=1e-12), type(system).__name__
        assert means["hit_rate@1"] == expected["hit_rate@1"]


def test_a_langchain_metadata_score_is_read_when_a_number_and_ignored_when_not() -> None:
    import numpy as np
    from langchain_core.documents import Document

    from composer.evaluation.system import SystemError_, as_hits

    def doc(doc_id: str, score: object) -> Document:
        return Document(page_content=doc_id, metadata={"source": doc_id, "score": score})

    numpy_scores = as_hits([doc("a.md", np.float32(0.5)), doc("b.md", np.float64(0.25))], "q")
    assert [(h.id, h.score) for h in numpy_scores] == [("a.md", 0.5), ("b.md", 0.25)]
    for bad in ("4/5 stars", float("nan"), True, None):  # no score: stand-ins in the order given
        hits = as_hits([doc("a.md", bad), doc("b.md", 0.9)], "q")
        assert [(h.id, h.score) for h in hits] == [("a.md", 2.0), ("b.md", 1.0)], bad
    with pytest.raises(SystemError_, match="not a finite number at rank 1: '4/5 stars'"):
        as_hits([{"id": "a.md", "score": "4/5 stars"}], "q")  # a top-level score is the system's own


def test_an_unusable_system_is_told_what_is_accepted(questions: QuestionSet, tmp_path: Path) -> None:
    class VectorStore:  # LangChain's vector stores search, but are no retriever until as_retriever()
        def as_retriever(self) -> None: ...

    for unusable, hint in ((object(), None), (VectorStore(), ".as_retriever()")):
        with pytest.raises(composer.ComposerError) as caught:
            composer.evaluate(unusable, questions, workdir=tmp_path)
        message = str(caught.value)
        assert all(word in message for word in ("retrieve(question)", "invoke(question)", "callable"))
        assert hint is None or hint in message



@pytest.mark.slow
def test_a_factory_that_returns_no_system_stops_the_study_at_its_first_trial(
    questions: QuestionSet, tmp_path: Path
) -> None:
    """Every trial would fail alike: the study stops at the first, with the message, not after the stop
    rule's three failures."""
    import optuna

    calls: list[dict[str, Any]] = []

    def factory(settings: dict[str, Any]) -> Any:
        calls.append(settings)
        return object()

    with pytest.raises(composer.ComposerError) as caught:
        composer.optimize(factory, space={"k": [1, 3, 10]}, questions=questions, n_trials=6,
                          workdir=tmp_path, name="no-system")
    assert all(word in str(caught.value) for word in ("retrieve(question)", "invoke(question)", "callable"))
    assert len(calls) == 1
    study = optuna.load_study(study_name="no-system", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL]

# -- a flat space, optimize without a corpus, the API's words ---------------------------------------------


@pytest.mark.slow
def test_a_flat_space_with_bare_lists_and_typed_ranges_optimizes_a_factory_without_a_corpus(
    corpus: Corpus, questions: QuestionSet, tmp_path: Path
) -> None:
    ranked = _ranked(corpus)
    built: list[dict[str, Any]] = []

    def factory(settings: dict[str, Any]) -> Any:
        built.append(settings)
        return lambda question: [d for d, _, _ in ranked(question)][: settings["k"]]

    result = composer.optimize(
        factory,
        space={"k": [1, 3, 10], "k1": {"low": 0.5, "high": 2.0}, "b": {"low": 1, "high": 4, "log": True}},
        questions=questions,  # no corpus: the system searches its own collection, as evaluate allows
        n_trials=3,
        workdir=tmp_path,
        name="flat",
        objective={"metrics": {"recall": 1.0}, "k": 10},
        sampler={"name": "random", "seed": 3},
    )
    assert result.best_value is not None and result.best_value > 0
    assert built and all(isinstance(s["k1"], float) and isinstance(s["b"], int) for s in built)
    assert all(s["k"] in (1, 3, 10) and 1 <= s["b"] <= 4 for s in built)


@pytest.mark.parametrize(
    ("space", "where"),
    [
        ({"k1": {"low": 0.5, "high": 2.0}, "b": {"low": 0.1, "hihg": 0.9}}, 'space["b"]["hihg"]'),
        ({"dimensions": {"b": {"low": 2, "high": 1}}}, 'space["dimensions"]["b"]'),
        ({"defaults": {}, "b": [1, 2]}, 'space["b"]'),
    ],
)
def test_errors_about_an_in_memory_space_name_the_argument_not_a_file(
    questions: QuestionSet, tmp_path: Path, space: dict[str, Any], where: str
) -> None:
    with pytest.raises(composer.ComposerError) as caught:
        composer.optimize(lambda settings: (lambda q: []), space=space, questions=questions,
                          workdir=tmp_path, n_trials=1)
    message = str(caught.value)
    assert message.startswith(f"{where}: ") and "inputs" not in message and ".yaml" not in message


def test_a_flat_space_file_still_reads_and_the_full_form_too(tmp_path: Path) -> None:
    from composer.study.space_file import load_search_space

    flat = tmp_path / "flat.yaml"
    flat.write_text("retrieval.k: [3, 5]\nretrieval.b: {low: 0, high: 1}\n", encoding="utf-8")
    dims = {d.key: d for d in load_search_space(flat).dimensions}
    # the range's type is the setting's own: bm25 b is a float even with integer bounds
    assert (dims["retrieval.k"].choices, dims["retrieval.b"].kind) == ((3, 5), "float")
    full = load_search_space(Path(__file__).resolve().parents[2] / "search_spaces" / "arabic-offline.yaml")
    assert full.dimensions


def test_a_library_error_suggests_the_apis_words_and_the_cli_its_flags() -> None:
    from composer.errors import ConfigError, option

    error = ConfigError(f"use another study name ({option('study_name', 'x-2')})", field="name")
    assert str(error) == "field 'name': use another study name (name='x-2')"
    assert error.cli_message() == "field 'name': use another study name (--study-name x-2)"
    assert error.message == "use another study name (name='x-2')"  # no marker left in what callers read


# -- load_pipeline keeps its caches beside its config, not in the current folder --------------------------


def test_load_pipeline_creates_nothing_in_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, elsewhere, cache = tmp_path / "project", tmp_path / "elsewhere", tmp_path / "cache"
    for folder in (project, elsewhere):
        folder.mkdir()
    config = project / "pipeline.yaml"
    config.write_text("retrieval: {mode: bm25, k: 3}\n", encoding="utf-8")
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    pipe = composer.load_pipeline(config, SAMPLE / "corpus.jsonl")
    assert pipe.search("جمال خاشقجي")
    assert pipe.workdir == project / ".composer" and pipe.workdir.is_dir()
    in_memory = composer.load_pipeline({"retrieval": {"mode": "bm25", "k": 3}}, SAMPLE / "corpus.jsonl")
    assert in_memory.workdir == cache / "composer"
    assert list(elsewhere.iterdir()) == []


def test_headers_in_the_llm_block_never_reach_a_trials_config_and_are_masked_anywhere() -> None:
    """A header may hold a credential (Authorization: Bearer ...): the config a trial records and the
    export writes leaves headers out, and scrubbing masks such a header wherever one turns up."""
    from composer.generation.config import GenerationConfig
    from composer.llm.config import LLMConfig
    from composer.redact import scrub

    run = LLMConfig(model="openai/m", api_base="http://127.0.0.1:9", max_tokens=200,
                    params={"top_p": 0.3, "extra_headers": {"Authorization": "Bearer sk-secret"}})
    recorded = GenerationConfig(model="openai/m").resolved(run)
    assert recorded.params == {"top_p": 0.3} and recorded.max_tokens == 200
    assert "sk-secret" not in str(recorded.model_dump())
    masked = scrub({"params": {"extra_headers": {"Authorization": "Bearer sk-secret", "Cookie": "s=1"}}})
    assert "sk-secret" not in str(masked) and "s=1" not in str(masked)


def test_a_trials_identity_is_what_the_space_builds_before_the_llm_blocks_settings(tmp_path: Path) -> None:
    """Writing the llm: block's settings into a trial's config must not change its identity: trials of a
    study recorded before they were written in are still found (repeats) and re-scored (the winner)."""
    import optuna

    from composer.data.types import Corpus, QuestionSet
    from composer.llm.config import LLMConfig
    from composer.objective import ObjectiveConfig
    from composer.study.data import StudyData, config_hash
    from composer.study.space_file import parse_search_space

    llm = LLMConfig(model="openai/m", api_base="http://127.0.0.1:9", max_tokens=200, params={"seed": 11})
    space = parse_search_space({"dimensions": {"retrieval.k": {"choices": [3, 5]}}})
    data = StudyData(corpus=Corpus([], "none"), questions=QuestionSet([], "none"), space=space,
                     objective_config=ObjectiveConfig(k=3, metrics={"recall": 1.0}), workdir=tmp_path,
                     llm=llm)
    trial = optuna.create_study().ask()
    params = space.params(trial)
    config, digest = data.configure(params)
    assert digest == config_hash(data.space.build(params))  # the identity trials had before this round
    assert config.generation.max_tokens == 200 and config.generation.params == {"seed": 11}
