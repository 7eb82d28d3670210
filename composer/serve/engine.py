"""What the service calls: a Composer pipeline (from a config, or unwrapped from an MLflow pyfunc model), or
any other pyfunc model through ``predict``.

A pipeline is not safe to rank from several threads at once: its retriever, rerankers and embedder are
built on first use, Qdrant Edge shards and the candidate memo are shared, and torch models keep per-call
state. So ranking holds one lock, while answering (an LLM call on the process's one LLM loop, or the
extractive answerer, both re-entrant) runs unlocked: concurrent ``/ask`` requests wait on the LLM
together, not one after another.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from composer.data.ranking import Ranking
from composer.data.types import Hit, Question, Turn
from composer.errors import ComposerError
from composer.generation import Answer, contexts_for
from composer.llm.faults import scrub
from composer.llm.sync import iterate_sync
from composer.pipeline.pipeline import Pipeline
from composer.redact import scrub_url

MODEL_SCHEMES = ("models:/", "runs:/")
"""Targets loaded with ``mlflow.pyfunc.load_model`` rather than read as a config file."""


@dataclass(frozen=True)
class ServedHit:
    id: str
    text: str | None
    score: float
    doc_id: str | None
    citation: str


@dataclass(frozen=True)
class Reply:
    """One answer as the service returns it (``answer`` None: ``error`` says why)."""

    answer: str | None
    language: str
    contexts: tuple[str, ...] = ()
    hits: tuple[ServedHit, ...] = ()
    citations: tuple[str, ...] = ()
    refusal: bool = False
    error: str | None = None
    usage: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Timed:
    """A result and the seconds the pipeline itself took (waiting for the lock excluded)."""

    value: Any
    seconds: float


class Engine(Protocol):
    name: str
    answerer: str
    can_search: bool

    def search(self, question: str, k: int | None) -> Timed: ...

    def ask(self, question: str, history: Sequence[Turn] = ()) -> Timed: ...

    def stream(self, question: str, history: Sequence[Turn] = ()) -> Iterator[str | Timed]:
        """The answer's text in pieces as it is written, then the whole Reply, timed, as ``ask`` gives it."""
        ...


class PipelineEngine:
    """A Composer pipeline, ranking under one lock (see the module's docstring)."""

    can_search = True

    def __init__(self, pipeline: Pipeline, name: str) -> None:
        self.pipeline = pipeline
        self.name = name
        self.answerer = pipeline.answerer
        self.default_k = pipeline.config.retrieval.k
        self._lock = threading.Lock()
        try:
            pipeline.handle  # noqa: B018 -- an unindexed pipeline is refused before the port opens
        except ComposerError:
            raise ComposerError(f"{name}: the pipeline has no index: give --corpus, the documents to "
                                "search") from None
        pipeline.search("warm-up")  # builds the retriever, loads the models: the first user waits not
        pipeline.citation("")  # builds the chunk table citations read, before threads race to
        pipeline.generator  # noqa: B018 -- and the LLM client, once

    def search(self, question: str, k: int | None) -> Timed:
        with self._lock:
            started = time.perf_counter()
            hits = self.pipeline.search(question, k)
            seconds = time.perf_counter() - started
        return Timed([self._hit(h) for h in hits], seconds)

    def ask(self, question: str, history: Sequence[Turn] = ()) -> Timed:
        """``Pipeline.ask``, its ranking locked and its answering not; ``history`` (earlier turns, oldest
        first) goes through the pipeline's ``conversation:`` stage."""
        q = Question(id="question", question=question, history=tuple(history))
        ranking, ranked = self._rank(q)
        started = time.perf_counter()
        answer = self.pipeline.answer([q], ranking)[q.id]
        return Timed(self._reply(answer, ranking), ranked + time.perf_counter() - started)

    def stream(self, question: str, history: Sequence[Turn] = ()) -> Iterator[str | Timed]:
        """``ask``'s answer as the generator's LLM writes it; the extractive answerer, which writes no
        tokens, gives its answer as one piece."""
        generator = self.pipeline.generator
        if generator is None:
            done = self.ask(question, history)
            if done.value.answer is not None:
                yield done.value.answer
            yield done
            return
        q = Question(id="question", question=question, history=tuple(history))
        ranking, ranked = self._rank(q)
        started = time.perf_counter()
        contexts = contexts_for(ranking.hits(0), self.pipeline.config.generation.max_contexts)
        answer: Answer | None = None
        for item in iterate_sync(generator.astream(q.question, contexts, q.history)):
            if isinstance(item, Answer):
                answer = item
            else:
                yield item
        assert answer is not None, "a generator's stream ends with its answer"
        yield Timed(self._reply(answer, ranking), ranked + time.perf_counter() - started)

    def _rank(self, q: Question) -> tuple[Ranking, float]:
        """``q``'s ranking under the lock, and the seconds it took (waiting excluded)."""
        with self._lock:
            started = time.perf_counter()
            ranking, _ = self.pipeline.rank([q])
            return ranking, time.perf_counter() - started

    def _reply(self, answer: Answer, ranking: Ranking) -> Reply:
        hits = tuple(self._hit(h) for h in ranking.hits(0))
        cited = hits[: len(answer.contexts) or None]
        result = answer.result
        usage = {} if result is None else {"prompt_tokens": result.prompt_tokens,
                                           "completion_tokens": result.completion_tokens}
        error = None if result is None or result.error is None else scrub(result.error)
        return Reply(answer.text, answer.language, answer.contexts, hits,
                     tuple(dict.fromkeys(h.citation for h in cited)), answer.refusal, error, usage)

    def _hit(self, hit: Hit) -> ServedHit:
        return ServedHit(hit.id, hit.text, hit.score, hit.doc_id, self.pipeline.citation(hit.id))


class PredictEngine:
    """An MLflow pyfunc model that holds no Composer pipeline: ``predict([question])`` answers, one row per
    question, each a text or a mapping with ``answer`` (and optionally ``contexts``, ``citations``); a
    follow-up is sent as ``predict([{"question": ..., "history": [{"role", "text"}, ...]}])``. Calls are
    serialized: nothing says the model is thread-safe."""

    can_search = False
    answerer = "pyfunc"

    def __init__(self, model: Any, name: str) -> None:
        self.model = model
        self.name = name
        self._lock = threading.Lock()

    def search(self, question: str, k: int | None) -> Timed:
        raise ComposerError(f"{self.name} is a pyfunc model without a Composer pipeline: it answers only")

    def ask(self, question: str, history: Sequence[Turn] = ()) -> Timed:
        from composer.llm.prompt import prompt_language

        given: Any = question
        if history:
            given = {"question": question, "history": [t.to_dict() for t in history]}
        with self._lock:
            started = time.perf_counter()
            out = self.model.predict([given])
            seconds = time.perf_counter() - started
        row = _first_row(out)
        lang = prompt_language(question)
        if isinstance(row, Mapping):
            text = row.get("answer")
            return Timed(Reply(None if text is None else str(text), lang,
                               tuple(map(str, row.get("contexts") or ())),
                               citations=tuple(map(str, row.get("citations") or ()))), seconds)
        return Timed(Reply(None if row is None else str(row), lang), seconds)

    def stream(self, question: str, history: Sequence[Turn] = ()) -> Iterator[str | Timed]:
        """``predict`` writes no tokens: its answer as one piece."""
        done = self.ask(question, history)
        if done.value.answer is not None:
            yield done.value.answer
        yield done


def _first_row(out: Any) -> Any:
    """The first answer of a pyfunc's output: a list, a pandas Series or DataFrame, or a numpy array."""
    if hasattr(out, "to_dict") and hasattr(out, "columns"):  # a DataFrame: its first row as a mapping
        rows = out.to_dict("records")
        return rows[0] if rows else None
    if hasattr(out, "tolist"):
        out = out.tolist()
    if isinstance(out, str | Mapping) or not isinstance(out, Sequence):
        return out
    return out[0] if out else None


def load_engine(
    target: str,
    corpus: Path | None = None,
    *,
    workdir: Path | None = None,
    qdrant: str | None = None,
) -> Engine:
    """The engine for a pipeline config (indexed on ``corpus``) or an MLflow model URI.

    Args:
        target: A pipeline YAML or export file, or ``models:/NAME@alias`` / ``runs:/ID/path``.
        corpus: The documents to index; a config needs it, a model brings its own index.
        workdir: Indexes and caches (``load_pipeline``'s default when None).
        qdrant: A Qdrant server URL; None keeps the index in Qdrant Edge.
    """
    from composer.api import load_pipeline

    if target.startswith(MODEL_SCHEMES):
        return _model_engine(target, corpus)
    if corpus is None:
        raise ComposerError(f"{target}: a pipeline config needs --corpus, the documents to search")
    pipe = load_pipeline(target, corpus, workdir=workdir, qdrant=qdrant)
    return PipelineEngine(pipe, Path(target).stem)


def _model_engine(uri: str, corpus: Path | None) -> Engine:
    """A registered Composer model's pipeline, opened from its files (``composer.registered.model_files``);
    another pyfunc model's pipeline when it exposes one (the model itself, or its ``pipeline``), else its
    ``predict``. With ``corpus`` the pipeline is (re)indexed on it: a model may carry its config only."""
    from composer.registered.model_files import composer_artifacts, open_pipeline, registered_folder

    name = uri.split(":/", 1)[1].strip("/") or uri
    store = _existing_store(uri)
    folder = registered_folder(uri, store)  # a local registry read directly: no MLflow import nor opening
    if folder is None:
        folder = _downloaded(uri, store)
    artifacts = composer_artifacts(folder)
    if artifacts is not None:
        pipe = open_pipeline(artifacts)
    else:
        pipe = _pyfunc_pipeline(uri, folder)
        if not isinstance(pipe, Pipeline):
            return PredictEngine(pipe, name)
    if corpus is not None:
        from composer.data import load_corpus

        pipe.index(load_corpus(corpus))
    return PipelineEngine(pipe, name)


def _existing_store(uri: str) -> str:
    """The MLflow store (its registry) ``uri`` is read from, as MLflow's variables or settings say, refused
    when it is a local one that does not exist: MLflow would create it (``./mlflow.db`` by default) only to
    find no model in it."""
    import os

    from composer.store import sqlite_file

    store = os.environ.get("MLFLOW_REGISTRY_URI") or os.environ.get("MLFLOW_TRACKING_URI")
    if "mlflow" in sys.modules or not store:  # MLflow's settings, where they may differ from the variables
        import mlflow

        store = str(mlflow.get_registry_uri())
    file = Path(unquote(urlparse(store).path)) if store.startswith("file:") else sqlite_file(store)
    if file is not None and (not file.exists() or (file.is_file() and file.stat().st_size == 0)):
        raise ComposerError(f"{uri}: no MLflow store at {file.resolve()} to read it from: name the store "
                            "the model was registered in with -e EXPERIMENT.yaml, --workdir (the study's "
                            "work dir), --tracking-uri or $MLFLOW_TRACKING_URI")
    return store


def _downloaded(uri: str, store: str) -> Path:
    """The local folder of the MLflow model ``uri`` in ``store`` (downloaded where its artifacts are
    remote); one line naming the store where it is not there."""
    import mlflow.artifacts
    from mlflow.exceptions import MlflowException

    try:
        return Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, registry_uri=store))
    except (MlflowException, OSError) as exc:
        raise ComposerError(f"{uri}: cannot load the model from the MLflow store {scrub_url(store)}: "
                            f"{scrub(str(exc)).splitlines()[0]}") from None


def _pyfunc_pipeline(uri: str, folder: Path) -> Any:
    """The pipeline of the pyfunc model saved as ``folder`` (the model itself, or its ``pipeline``), else
    the loaded model."""
    import mlflow.pyfunc
    from mlflow.exceptions import MlflowException

    try:
        # No scan of every installed package for the model's pins (9.5 of a 17 s load measured on the
        # sample's model, benchmarks/bench_serve.py --registry): the server is what runs the model.
        model = mlflow.pyfunc.load_model(str(folder), suppress_warnings=True)
    except (MlflowException, OSError) as exc:
        raise ComposerError(f"{uri}: cannot load the model: {scrub(str(exc)).splitlines()[0]}") from None
    try:
        inner: Any = model.unwrap_python_model()
    except MlflowException:  # another flavor (a sklearn model...): predict only
        inner = None
    pipe = inner if isinstance(inner, Pipeline) else getattr(inner, "pipeline", None)
    return pipe if isinstance(pipe, Pipeline) else model
