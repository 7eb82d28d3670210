"""A Composer pipeline as an MLflow pyfunc model that brings its own index.

The model's artifacts are the pipeline config (``pipeline.json``), the saved index it searches (the folder
``composer.pipeline.saved`` writes: chunks, fitted BM25, arrays), its finished Qdrant Edge shard, packed
without its holes (``edge``), and, when the embedding model is a local folder, a copy of it. Loading
(``composer.registered.model_files.open_pipeline``) puts the saved index and a copy of the shard into a fresh
work dir and opens them there (no corpus, no analysis, no upsert), so
``mlflow.pyfunc.load_model("models:/NAME@champion").predict(...)`` answers in any process without the
study's work dir or its corpus. A Qdrant server's collection is not copied: ``composer.json`` references
it (URL, collection, the name of the key's variable, never the key) and loading opens it there; the saved
index still travels, since Composer's chunk table, BM25 state and rescoring vectors are not in the
collection. ``composer serve`` opens the same files itself, without MLflow's pyfunc loader.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from mlflow.pyfunc import PythonModel

from composer.errors import InputError
from composer.pipeline.pipeline import Pipeline
from composer.registered.model_files import open_pipeline
from composer.retrieval.conversation import history_turns

OUTPUT_FIELDS = ("answer", "contexts", "hits", "citations", "language", "refusal")
"""What ``predict`` returns per question."""
_LOCK = threading.Lock()
"""A pipeline ranks from one thread at a time (see ``composer.serve.engine``); a server may call
``predict`` from several."""


class ComposerModel(PythonModel):
    """Answers questions with the pipeline rebuilt from the model's artifacts (see the module)."""

    def __init__(self) -> None:
        self.pipeline: Pipeline | None = None

    def load_context(self, context: Any) -> None:
        self.pipeline = open_pipeline(dict(context.artifacts))

    # No hints here: MLflow reads them as the model's input schema (the signature says it instead).
    def predict(self, context, model_input, params=None):  # type: ignore[no-untyped-def]
        """One row per question (``OUTPUT_FIELDS``): a string, a list of them, a DataFrame with a
        ``question`` column, or ``{"question", "history"}`` rows (a follow-up and its earlier turns,
        ``[{"role", "text"}]``, through the pipeline's ``conversation:`` stage)."""
        pipe = self.pipeline
        assert pipe is not None, "load_context opens the pipeline"
        rows = []
        for question, given in asks_of(model_input):
            history = history_turns(given)
            with _LOCK:
                answer = pipe.ask(question, history=history)
            hits = [{"id": h.id, "text": h.text, "score": h.score, "doc_id": h.doc_id,
                     "citation": pipe.citation(h.id)} for h in answer.hits]
            rows.append({"answer": answer.text, "contexts": list(answer.contexts), "hits": hits,
                         "citations": list(answer.citations), "language": answer.language,
                         "refusal": answer.refusal})
        return rows


def _history_cell(cell: Any) -> Any:
    """A DataFrame's history cell: a list of turns, or the JSON text of one (as a CSV holds it)."""
    if isinstance(cell, str) and cell.strip():
        try:
            return json.loads(cell)
        except ValueError:
            raise InputError("a history cell is neither a list of turns nor JSON text of one",
                              field="history") from None
    return cell if isinstance(cell, list | tuple) else None


def signature() -> Any:
    """Questions (strings) in; per question ``OUTPUT_FIELDS`` out, each hit with its citation."""
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Array, ColSpec, Object, Property, Schema

    hit = Object([Property("id", "string"), Property("text", "string", required=False),
                  Property("score", "double"), Property("doc_id", "string", required=False),
                  Property("citation", "string")])
    outputs = Schema([
        ColSpec("string", "answer", required=False), ColSpec(Array("string"), "contexts"),
        ColSpec(Array(hit), "hits"), ColSpec(Array("string"), "citations"), ColSpec("string", "language"),
        ColSpec("boolean", "refusal"),
    ])
    return ModelSignature(inputs=Schema([ColSpec("string")]), outputs=outputs)


def asks_of(model_input: Any) -> list[tuple[str, Any]]:
    """(question, its history or None) for each question in a pyfunc input: a string, a sequence of
    strings or ``{"question", "history"}`` mappings, one such mapping, or a DataFrame (its ``question``
    column, else its first, and its ``history`` column if it has one)."""
    if isinstance(model_input, str):
        return [(model_input, None)]
    if hasattr(model_input, "columns"):
        column = "question" if "question" in model_input.columns else model_input.columns[0]
        questions = [str(q) for q in model_input[column].tolist()]
        if "history" not in model_input.columns:
            return [(q, None) for q in questions]
        cells = [h.tolist() if hasattr(h, "tolist") else h for h in model_input["history"].tolist()]
        return [(q, _history_cell(h)) for q, h in zip(questions, cells, strict=True)]
    if isinstance(model_input, Mapping):
        value = model_input.get("question")
        if isinstance(value, str):
            return [(value, model_input.get("history"))]
        return [(str(q), None) for q in value or ()]
    if isinstance(model_input, Sequence) or hasattr(model_input, "tolist"):
        items = model_input.tolist() if hasattr(model_input, "tolist") else model_input
        return [(str(q.get("question")), q.get("history")) if isinstance(q, Mapping) else (str(q), None)
                for q in items]
    raise TypeError(f"a question, a list of them or a DataFrame with a question column, not {model_input!r}")
