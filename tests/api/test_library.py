"""Composer as a library: ``composer.evaluate``, ``composer.optimize`` and ``composer.load_pipeline`` on
Composer's pipelines and on a user's own system (a class, an async class, a callable, a factory)."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import bm25s
import optuna
import pytest
import pytrec_eval
from langchain_core.documents import Document as LCDocument
from sample_study import SAMPLE, sample_corpus, sample_questions, write_experiment

import composer
from composer.data.types import Corpus, QuestionSet
from composer.errors import ComposerError, ConfigError


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return sample_corpus()


@pytest.fixture(scope="module")
def questions(corpus: Corpus) -> QuestionSet:
    return sample_questions(corpus, 60)


class Bm25sRetriever:
    """A user's own retriever: the bm25s library over the sample corpus, ``k`` hits per question."""

    def __init__(self, corpus: Corpus, k: int = 10) -> None:
        self.ids = [d.id for d in corpus]
        self.texts = [d.text for d in corpus]
        self.k = k
        self.model = bm25s.BM25()
        self.model.index(bm25s.tokenize(self.texts, show_progress=False), show_progress=False)

    def ranked(self, question: str) -> list[tuple[str, float]]:
        found, scores = self.model.retrieve(
            bm25s.tokenize([question], show_progress=False), k=self.k, show_progress=False
        )
        return [(self.ids[i], float(s)) for i, s in zip(found[0].tolist(), scores[0].tolist(), strict=True)]

    def retrieve(self, question: str) -> list[dict[str, Any]]:
        return [{"id": doc_id, "score": score} for doc_id, score in self.ranked(question)]


def test_import_is_light_and_exports_the_api() -> None:
    code = (
        "import sys, composer\n"
        "heavy = [m for m in ('torch', 'litellm', 'mlflow', 'optuna', 'sentence_transformers', 'pandas') "
        "if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "assert all(callable(f) for f in (composer.evaluate, composer.optimize, composer.load_pipeline))\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
    with pytest.raises(AttributeError):
        composer.no_such_name  # noqa: B018


def test_custom_retriever_equals_pytrec_eval_on_its_own_ranking(
    corpus: Corpus, questions: QuestionSet, tmp_path: Path
) -> None:
    system = Bm25sRetriever(corpus)
    report = composer.evaluate(system, questions, corpus, k=(1, 5, 10), workdir=tmp_path)
    # pytrec_eval on the same lists, scored by rank so that it keeps the system's own order (ties too)
    run = {
        q.id: {doc: float(10 - i) for i, (doc, _) in enumerate(system.ranked(q.question))} for q in questions
    }
    qrels = {q.id: {doc: 1 for doc in q.relevant_ids} for q in questions}
    trec = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.5", "recip_rank"}).evaluate(run)
    frame = report.to_dataframe().set_index("question_id")
    for q in questions:
        assert frame.loc[q.id, "ndcg@10"] == pytest.approx(trec[q.id]["ndcg_cut_10"], abs=1e-12)
        assert frame.loc[q.id, "recall@5"] == pytest.approx(trec[q.id]["recall_5"], abs=1e-12)
    assert report.means()["ndcg@10"] > 0.5
    assert report.meta["system"] == "none"  # retrieve only: nothing answered
    assert "retrieve" in report.latency_ms()


def test_sync_async_and_callable_systems_score_alike(
    corpus: Corpus, questions: QuestionSet, tmp_path: Path
) -> None:
    base = Bm25sRetriever(corpus)

    class AsyncSystem:
        async def retrieve(self, question: str) -> list[str]:
            await asyncio.sleep(0)
            return [doc for doc, _ in base.ranked(question)]

        async def answer(self, question: str, contexts: list[str]) -> str:
            return contexts[0][:80] if contexts else "لا أعرف"

    class SyncSystem:
        def retrieve(self, question: str) -> list[str]:
            return [doc for doc, _ in base.ranked(question)]

        def answer(self, question: str, contexts: list[str]) -> str:
            return contexts[0][:80] if contexts else "لا أعرف"

    def plain(question: str) -> list[str]:
        return [doc for doc, _ in base.ranked(question)]

    reports = [
        composer.evaluate(s, questions, corpus, workdir=tmp_path, concurrency=c)
        for s, c in ((SyncSystem(), 1), (SyncSystem(), 4), (AsyncSystem(), 8), (plain, 2))
    ]
    first = reports[0].means()
    for report in reports[1:]:
        for name in ("ndcg@10", "recall@10", "hit_rate@1", "mrr@10"):
            assert report.means()[name] == pytest.approx(first[name], abs=1e-12)
    # the two answering systems gave answers, which the deterministic scorers graded
    assert reports[0].meta["system"] == "system:SyncSystem"
    assert reports[2].meta["system"] == "system:AsyncSystem"
    assert first["token_f1"] == pytest.approx(reports[2].means()["token_f1"])
    assert "token_f1" not in reports[3].means()


def test_langchain_documents_and_llamaindex_nodes_are_read_by_shape(
    corpus: Corpus, questions: QuestionSet, tmp_path: Path
) -> None:
    base = Bm25sRetriever(corpus)
    by_id = {d.id: d for d in corpus}

    class TextNode:  # LlamaIndex's shape (llama-index-core is not a light package): node_id, get_content()
        def __init__(self, node_id: str, text: str) -> None:
            self.node_id = node_id
            self._text = text
            self.metadata: dict[str, Any] = {}

        def get_content(self) -> str:
            return self._text

    class NodeWithScore:
        def __init__(self, node: TextNode, score: float) -> None:
            self.node = node
            self.score = score

    def langchain(question: str) -> list[LCDocument]:
        return [LCDocument(page_content=by_id[d].text, metadata={"id": d}) for d, _ in base.ranked(question)]

    def langchain_ids(question: str) -> list[LCDocument]:
        return [LCDocument(page_content=by_id[d].text, id=d) for d, _ in base.ranked(question)]

    def llama(question: str) -> list[NodeWithScore]:
        return [NodeWithScore(TextNode(d, by_id[d].text), s) for d, s in base.ranked(question)]

    expected = composer.evaluate(base, questions, corpus, workdir=tmp_path).means()["ndcg@10"]
    for system in (langchain, langchain_ids, llama):
        report = composer.evaluate(system, questions, corpus, workdir=tmp_path)
        assert report.means()["ndcg@10"] == pytest.approx(expected, abs=1e-12)
    # the texts came with the items: context-size metrics see them
    assert report.mean_context_tokens() > 0


def test_a_system_that_raises_on_some_questions_is_counted(
    corpus: Corpus, questions: QuestionSet, tmp_path: Path
) -> None:
    base = Bm25sRetriever(corpus)
    failing = {q.question for q in list(questions)[:3]}

    def flaky(question: str) -> list[str]:
        if question in failing:
            raise TimeoutError("vector store timed out")
        return [doc for doc, _ in base.ranked(question)]

    report = composer.evaluate(flaky, questions, corpus, workdir=tmp_path)
    errors = report.error_counts()
    assert errors == {"retrieval": {"TimeoutError": 3}}
    frame = report.to_dataframe()
    assert frame["error"].notna().sum() == 3
    assert frame.loc[frame["error"].notna(), "ndcg@10"].eq(0).all()  # retrieved nothing: scored 0

    def broken(question: str) -> list[str]:
        raise ConnectionError("down")

    with pytest.raises(ComposerError, match=r"60 of 60 samples failed"):
        composer.evaluate(broken, questions, corpus, workdir=tmp_path)


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        (None, r"retrieve\('.*'\) \(question '\d+'\) returned None"),
        ("arcd-000-0", r"returned str, expected a list"),
        ([{"text": "no id"}], r"without an id at rank 1"),
        ([{"id": "arcd-000-0", "score": "high"}], r"score that is not a finite number at rank 1"),
        ([object()], r"without an id at rank 1 \(object\)"),
    ],
)
def test_bad_returns_name_the_question(
    returned: Any, message: str, corpus: Corpus, questions: QuestionSet, tmp_path: Path
) -> None:
    with pytest.raises(ComposerError, match=message):
        composer.evaluate(lambda q: returned, questions, corpus, workdir=tmp_path)


def test_answer_returning_a_non_string_names_the_question(
    corpus: Corpus, questions: QuestionSet, tmp_path: Path
) -> None:
    class System:
        def retrieve(self, question: str) -> list[str]:
            return ["arcd-000-0"]

        def answer(self, question: str, contexts: list[str]) -> Any:
            return {"text": "x"}

    with pytest.raises(ComposerError, match=r"answer\('.*'\) \(question '\d+'\) returned dict"):
        composer.evaluate(System(), questions, corpus, workdir=tmp_path)


def test_runs_configs_and_pipelines_go_through_the_same_path(
    corpus: Corpus, questions: QuestionSet, tmp_path: Path
) -> None:
    from composer.data import load_ranking_file
    from composer.evaluation import evaluate_ranking

    run_file = SAMPLE / "bm25-run.jsonl"
    by_file = composer.evaluate(run_file, questions, corpus, workdir=tmp_path)
    run = load_ranking_file(run_file)
    by_mapping = composer.evaluate(
        {qid: [h.id for h in hits] for qid, hits in run.items()}, questions, corpus, workdir=tmp_path
    )
    reference = evaluate_ranking(questions, run, corpus=corpus)
    assert by_file.means()["ndcg@10"] == pytest.approx(reference.means()["ndcg@10"], abs=1e-12)
    assert by_mapping.means()["ndcg@10"] == pytest.approx(reference.means()["ndcg@10"], abs=1e-12)

    config = {"retrieval": {"mode": "bm25", "k": 10}, "chunking": {"method": "paragraph"}}
    by_dict = composer.evaluate(config, questions, corpus, workdir=tmp_path)
    pipe = composer.load_pipeline(config, corpus, workdir=tmp_path)
    by_pipeline = composer.evaluate(pipe, questions, corpus, workdir=tmp_path)
    assert by_dict.means()["ndcg@10"] == pytest.approx(by_pipeline.means()["ndcg@10"], abs=1e-12)
    assert by_dict.meta["index"]["chunks"] > 0
    assert by_dict.means()["ndcg@10"] > 0.5


def test_load_pipeline_search_and_ask(corpus: Corpus, tmp_path: Path) -> None:
    doc = next(iter(corpus))
    export = {"pipeline": {"retrieval": {"mode": "bm25", "k": 5}}, "scores": {}}
    pipe = composer.load_pipeline(export, corpus, workdir=tmp_path)
    query = doc.text[:300]
    hits = pipe.search(query)
    assert len(hits) == 5 and hits[0].doc_id == doc.id
    assert [h.id for h in pipe.search(query, k=2)] == [h.id for h in hits[:2]]
    answer = pipe.ask(f"ما هو {doc.title}؟")
    assert answer.text and answer.language == "ar" and not answer.refusal
    assert answer.contexts and answer.hits and answer.hits[0].doc_id
    assert answer.citations[0] == answer.hits[0].doc_id  # no pages in a JSONL corpus: the document
    again = asyncio.run(pipe.aask(f"ما هو {doc.title}؟"))
    assert again.text == answer.text
    assert [h.id for h in asyncio.run(pipe.asearch(query))] == [h.id for h in hits]


def test_api_errors_are_composer_errors_naming_the_key(
    corpus: Corpus, questions: QuestionSet, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=r"retrieval\.kk.*unknown key"):
        composer.load_pipeline({"retrieval": {"kk": 3}}, workdir=tmp_path)
    with pytest.raises(ConfigError, match=r"judge\.modle.*unknown key"):
        composer.evaluate(Bm25sRetriever(corpus), questions, corpus, judge={"modle": "x"}, workdir=tmp_path)
    with pytest.raises(ConfigError, match=r"unknown metric 'recal'"):
        composer.evaluate(Bm25sRetriever(corpus), questions, corpus, metrics=["recal"], workdir=tmp_path)
    with pytest.raises(ConfigError, match=r"need an LLM judge"):
        composer.evaluate(
            Bm25sRetriever(corpus), questions, corpus, metrics=["faithfulness"], workdir=tmp_path
        )
    with pytest.raises(ConfigError, match=r"no answer\(question, contexts\) method"):
        composer.evaluate(Bm25sRetriever(corpus), questions, corpus, judge="openai/x", workdir=tmp_path)
    with pytest.raises(ConfigError, match=r'^space\["dimensions"\]\["k"\]\["type"\]: '):
        composer.optimize(
            lambda s: Bm25sRetriever(corpus),
            space={"dimensions": {"k": {"type": "nope"}}},
            questions=questions,
            corpus=corpus,
            workdir=tmp_path,
        )
    with pytest.raises(ComposerError, match=r"cannot evaluate a int"):
        composer.evaluate(42, questions, corpus, workdir=tmp_path)


def test_evaluate_logs_to_mlflow(corpus: Corpus, questions: QuestionSet, tmp_path: Path) -> None:
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    composer.evaluate(
        Bm25sRetriever(corpus),
        questions,
        corpus,
        workdir=tmp_path,
        mlflow={"tracking_uri": uri, "experiment": "lib", "run_name": "bm25s"},
    )
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("lib")
    assert exp is not None
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.run_name == "bm25s" and run.info.status == "FINISHED"
    assert run.data.metrics["ndcg_at_10"] > 0.5
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"summary.json", "samples.csv", "traces.jsonl", "error_rates.json"} <= names


SPACE = {
    "defaults": {"retriever": {"k1": 1.5}},
    "dimensions": {
        "k": {"choices": [1, 3, 10]},
        "retriever.k1": {"type": "float", "low": 0.5, "high": 2.0, "step": 0.5},
        "method": {"choices": ["lucene", "bm25+"]},
    },
}


class Factory:
    """A factory ``settings -> system`` that counts what it builds (each a trial that really ran)."""

    def __init__(self, corpus: Corpus) -> None:
        self.corpus = corpus
        self.built: list[dict[str, Any]] = []

    def __call__(self, settings: dict[str, Any]) -> Any:
        self.built.append(settings)
        system = Bm25sRetriever(self.corpus, k=settings["k"])
        system.model = bm25s.BM25(method=settings["method"], k1=settings["retriever"]["k1"])
        system.model.index(bm25s.tokenize(system.texts, show_progress=False), show_progress=False)
        return system


@pytest.mark.slow
def test_optimize_a_factory_prunes_resumes_and_rescores_the_winner(
    corpus: Corpus, questions: QuestionSet, tmp_path: Path
) -> None:
    from mlflow import MlflowClient

    factory = Factory(corpus)
    kwargs: dict[str, Any] = {
        "space": SPACE,
        "questions": questions,
        "corpus": corpus,
        "workdir": tmp_path,
        "name": "lib-study",
        "objective": {"metrics": {"ndcg": 1.0, "recall": 1.0}, "k": 10},
        "batch_size": 10,
        "split": {"held_out": 0.3},
        "sampler": {"name": "tpe", "seed": 1},
        "pruner": "median",
    }
    result = composer.optimize(factory, n_trials=8, **kwargs)
    assert isinstance(result.study, optuna.Study)
    states = [t.state for t in result.study.trials]
    finished = [s for s in states if s in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)]
    assert (
        len(
            {
                json.dumps(t.params, sort_keys=True)
                for t in result.study.trials
                if t.state == optuna.trial.TrialState.COMPLETE
            }
        )
        + states.count(optuna.trial.TrialState.PRUNED)
        >= 8
    )
    assert len(finished) >= 8
    # every setting the factory got is the space's: defaults under the sampled values
    assert all(set(s) == {"k", "retriever", "method"} for s in factory.built)
    assert result.best_config is not None and result.best_config["k"] in (1, 3, 10)
    assert result.best_params.keys() <= {"k", "retriever.k1", "method"}
    assert result.best_value == pytest.approx(result.study.best_value)
    held = result.held_out
    assert held is not None and held.winner is not None
    assert held.winner.trial == result.study.best_trial.number
    assert held.n_questions == round(len(questions) * 0.3)
    assert held.to_dict() == result.study.user_attrs["held_out"]  # the stored JSON reads back the same
    # MLflow: one parent run for the study, one nested run per trial
    client = MlflowClient(result.tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name("lib-study").experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1
    assert len(runs) - 1 == len(result.study.trials)
    # the same call again resumes: nothing more to run, and the winner's re-scores (held out, selection
    # CI) are read back from the study, so the factory is not called at all
    built = len(factory.built)
    ran = sum(1 for t in result.study.trials if t.user_attrs["composer"].get("duplicate_of") is None)
    assert built - ran >= 2  # the re-scores built the winner again once the trials were done
    again = composer.optimize(factory, n_trials=8, **kwargs)
    assert len(again.study.trials) == len(result.study.trials)
    assert len(factory.built) == built
    assert again.best_value == pytest.approx(result.best_value)


@pytest.mark.slow
def test_pruning_fires_for_a_factory(corpus: Corpus, questions: QuestionSet, tmp_path: Path) -> None:
    """A system that is much worse after the first batches is stopped before it answers every question."""
    factory = Factory(corpus)

    def factory_with_a_bad_choice(settings: dict[str, Any]) -> Any:
        system = factory(settings)
        if settings["k"] == 1:
            return lambda question: ["arcd-999-0"]  # never relevant
        return system

    space = {
        "defaults": {"method": "lucene", "retriever": {"k1": 1.5}},
        "dimensions": {"k": {"choices": [10, 1]}},
    }
    result = composer.optimize(
        factory_with_a_bad_choice,
        space=space,
        questions=questions,
        corpus=corpus,
        workdir=tmp_path,
        name="prune",
        n_trials=6,
        batch_size=10,
        objective={"metrics": {"ndcg": 1.0}, "k": 10},
        sampler={"name": "grid"},
        pruner={"name": "median", "n_startup_trials": 1, "n_warmup_steps": 0},
    )
    states = {t.params["k"]: t.state for t in result.study.trials}
    assert states[10] == optuna.trial.TrialState.COMPLETE
    assert states[1] == optuna.trial.TrialState.PRUNED
    assert result.best_params == {"k": 10}


@pytest.mark.slow
def test_a_factory_failing_above_the_failure_share_fails_the_trial_with_the_reason(
    corpus: Corpus, questions: QuestionSet, tmp_path: Path
) -> None:
    def factory(settings: dict[str, Any]) -> Any:
        base = Bm25sRetriever(corpus)
        if settings["k"] == 3:

            def dead(question: str) -> list[str]:
                raise ConnectionError("index down")

            return dead
        return base

    result = composer.optimize(
        factory,
        space={"dimensions": {"k": {"choices": [10, 3]}}},
        questions=questions,
        corpus=corpus,
        workdir=tmp_path,
        name="fails",
        n_trials=2,
        sampler={"name": "grid"},
        pruner="none",
        objective={"metrics": {"ndcg": 1.0}, "k": 10},
        stop={"consecutive_failures": None},
    )
    by_k = {t.params["k"]: t for t in result.study.trials}
    assert by_k[10].state == optuna.trial.TrialState.COMPLETE
    assert by_k[3].state == optuna.trial.TrialState.FAIL
    record = by_k[3].user_attrs["composer"]
    assert "samples failed" in record["error"]
    assert result.best_params == {"k": 10}
    assert not math.isnan(result.best_value or math.nan)


@pytest.mark.slow  # a whole study in a composer process, and a second one refused: ~11 s
def test_an_experiment_file_names_a_system_factory(corpus: Corpus, tmp_path: Path) -> None:
    """The CLI path: ``system: package.module:factory`` in an experiment file, run by composer optimize."""
    (tmp_path / "my_rag.py").write_text(
        "import bm25s, json\n"
        "from pathlib import Path\n"
        f"ROWS = [json.loads(l) for l in Path({str(SAMPLE / 'corpus.jsonl')!r}).read_text().splitlines()]\n"
        "def make(settings):\n"
        "    ids = [r['id'] for r in ROWS]\n"
        "    model = bm25s.BM25()\n"
        "    tokens = bm25s.tokenize([r['text'] for r in ROWS], show_progress=False)\n"
        "    model.index(tokens, show_progress=False)\n"
        "    def retrieve(question):\n"
        "        query = bm25s.tokenize([question], show_progress=False)\n"
        "        found, _ = model.retrieve(query, k=settings['k'], show_progress=False)\n"
        "        return [ids[i] for i in found[0].tolist()]\n"
        "    return retrieve\n",
        encoding="utf-8",
    )
    write_experiment(tmp_path, dims={"k": {"choices": [1, 5]}}, n_questions=10, file="exp.yaml",
                     name="own-rag", system="my_rag:make", sampler="grid",
                     objective={"metrics": {"recall": 1.0}, "k": 5}, workdir="work")
    env = {
        "PYTHONPATH": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PATH": "/usr/bin:/bin",
    }

    def optimize_cli(experiment: str) -> subprocess.CompletedProcess[str]:
        cli = Path(sys.executable).with_name("composer")
        return subprocess.run([str(cli), "optimize", str(tmp_path / experiment)], capture_output=True,
                              text=True, env=env, cwd=tmp_path, timeout=300)

    out = optimize_cli("exp.yaml")
    assert out.returncode == 0, out.stderr[-2000:]
    study = optuna.load_study(study_name="own-rag", storage=f"sqlite:///{tmp_path / 'work' / 'optuna.db'}")
    complete = [t.params["k"] for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert sorted(complete) == [1, 5]
    assert study.best_trial.params == {"k": 5}

    (tmp_path / "bad.yaml").write_text(
        (tmp_path / "exp.yaml").read_text(encoding="utf-8").replace("my_rag:make", "my_rag:nothing"),
        encoding="utf-8",
    )
    bad = optimize_cli("bad.yaml")
    assert bad.returncode == 2
    assert "cannot import the system factory 'my_rag:nothing'" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_systems_answers_and_a_run_files_answers_are_judged(
    corpus: Corpus, questions: QuestionSet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``judge=`` grades a user's answers through the same judges as ``composer eval --judge``, against the
    local scripted server (never a public endpoint)."""
    from fake_llm_server import FakeLLMServer
    from scripted_llm import ScriptedRAG

    base = Bm25sRetriever(corpus)
    golds = {q.question: q.reference_answer or "" for q in questions}

    class System:
        def retrieve(self, question: str) -> list[str]:
            return [doc for doc, _ in base.ranked(question)]

        async def answer(self, question: str, contexts: list[str]) -> str:
            return golds[question]

    monkeypatch.setenv("COMPOSER_JUDGE_KEY", "sk-test-secret")
    with FakeLLMServer(ScriptedRAG(golds)) as srv:
        judge = {"model": "openai/judge", "api_base": srv.url, "api_key_env": "COMPOSER_JUDGE_KEY",
                 "embedding": None}
        report = composer.evaluate(
            System(),
            questions,
            corpus,
            judge=judge,
            workdir=tmp_path,
            metrics=["answer_correctness", "faithfulness"],
        )
        means = report.means()
        assert means["answer_correctness"] > 0.9 and means["faithfulness"] > 0.9
        assert srv.stats()["chat_requests"] > 0
        run = tmp_path / "run.jsonl"
        run.write_text(
            "".join(
                json.dumps(
                    {
                        "id": q.id,
                        "results": [{"id": d} for d, _ in base.ranked(q.question)],
                        "answer": golds[q.question],
                    },
                    ensure_ascii=False,
                )
                + "\n"
                for q in questions
            ),
            encoding="utf-8",
        )
        judged_run = composer.evaluate(
            run, questions, corpus, judge=judge, workdir=tmp_path / "w2", metrics=["answer_correctness"]
        )
        assert judged_run.means()["answer_correctness"] == pytest.approx(means["answer_correctness"])
        assert judged_run.means()["ndcg@10"] == pytest.approx(means["ndcg@10"])
