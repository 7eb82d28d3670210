"""A Composer pipeline as an MLflow pyfunc model that brings its own index.

The model's artifacts are the pipeline config (``pipeline.json``), the saved index it searches (the folder
``composer.pipeline.saved`` writes: chunks, fitted BM25, arrays) and, when the embedding model is a local
folder, a copy of it. Loading puts the saved index into a fresh work dir and reopens it there, filling a
Qdrant Edge collection from its arrays (no corpus, no analysis), so
``mlflow.pyfunc.load_model("models:/NAME@champion").predict(...)`` answers in any process without the
study's work dir or its corpus. A Qdrant server's collection is not copied: ``composer.json`` references
it (URL, collection, the name of the key's variable, never the key) and loading opens it there; the saved
index still travels, since Composer's chunk table, BM25 state and rescoring vectors are not in the
collection. ``composer serve`` finds the pipeline as ``.pipeline``.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mlflow.pyfunc import PythonModel

from composer.errors import ComposerError
from composer.pipeline.pipeline import Pipeline
from composer.pipeline.saved import RECORD, SAVED_DIR, read_record

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
        """One row per question (``OUTPUT_FIELDS``): a string, a list of them, or a DataFrame with a
        ``question`` column."""
        pipe = self.pipeline
        assert pipe is not None, "load_context opens the pipeline"
        rows = []
        for question in questions_of(model_input):
            with _LOCK:
                answer = pipe.ask(question)
            hits = [{"id": h.id, "text": h.text, "score": h.score, "doc_id": h.doc_id,
                     "citation": pipe.citation(h.id)} for h in answer.hits]
            rows.append({"answer": answer.text, "contexts": list(answer.contexts), "hits": hits,
                         "citations": list(answer.citations), "language": answer.language,
                         "refusal": answer.refusal})
        return rows


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


def questions_of(model_input: Any) -> list[str]:
    """The questions in a pyfunc input: a string, a sequence of strings, or a DataFrame (its ``question``
    column, else its first)."""
    if isinstance(model_input, str):
        return [model_input]
    if hasattr(model_input, "columns"):
        column = "question" if "question" in model_input.columns else model_input.columns[0]
        return [str(q) for q in model_input[column].tolist()]
    if isinstance(model_input, Mapping):
        value = model_input.get("question")
        return [value] if isinstance(value, str) else [str(q) for q in value or ()]
    if isinstance(model_input, Sequence) or hasattr(model_input, "tolist"):
        items = model_input.tolist() if hasattr(model_input, "tolist") else model_input
        return [str(q if not isinstance(q, Mapping) else q.get("question")) for q in items]
    raise TypeError(f"a question, a list of them or a DataFrame with a question column, not {model_input!r}")


def open_pipeline(artifacts: Mapping[str, str]) -> Pipeline:
    """The pipeline of the model whose artifacts are ``artifacts``, its saved index reopened in a fresh
    work dir (linked, not copied: the arrays are mapped read-only): its Qdrant Edge collection filled from
    them there (no corpus, no analysis), or the Qdrant server collection it references opened."""
    config = json.loads(Path(artifacts["pipeline"]).read_text(encoding="utf-8"))
    server = json.loads(Path(artifacts["composer"]).read_text(encoding="utf-8")).get("qdrant")
    index = Path(artifacts["index"]).resolve()
    record = read_record(index)
    workdir = Path(tempfile.mkdtemp(prefix="composer-model-"))
    saved = workdir / SAVED_DIR / record["key"]
    saved.parent.mkdir()
    if "embedder" not in artifacts:
        saved.symlink_to(index, target_is_directory=True)
    else:  # a local model folder, copied with the model: the config and the index's record name the copy
        model = str(Path(artifacts["embedder"]).resolve())
        config["embedding"] = {**config["embedding"], "model": model}
        record["settings"]["embedding"]["model"] = model
        saved.mkdir()
        for part in index.iterdir():
            if part.name != RECORD:
                (saved / part.name).symlink_to(part)
        (saved / RECORD).write_text(json.dumps(record, ensure_ascii=False), encoding="utf-8")
    api_key = None
    if server is not None and server.get("api_key_env"):
        api_key = os.environ.get(server["api_key_env"])
    pipe = Pipeline.from_config(config, workdir=workdir, qdrant=None if server is None else server["url"],
                                api_key=api_key)
    if server is not None and not pipe.workspace.backend.exists(server["collection"]):
        raise ComposerError(f"the model's index is the collection {server['collection']!r} on "
                            f"{server['url']} (referenced, not copied), which is absent or unfinished there "
                            f"(API key from ${server.get('api_key_env')})")
    pipe.handle  # noqa: B018 -- opened now: a broken model fails at load, not at the first question
    return pipe
