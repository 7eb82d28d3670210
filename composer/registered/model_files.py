"""A registered Composer model opened from its files, without MLflow's pyfunc loader where that can be
avoided: what ``composer serve models:/...`` and the pyfunc model itself
(``composer.registered.mlflow_model``) both open.

A model's artifacts are the pipeline config (``pipeline.json``), ``composer.json`` (the Qdrant server
collection it references, or none), the saved index it searches (the folder ``composer.pipeline.saved``
writes: chunks, fitted BM25, arrays), with Qdrant Edge its finished shard packed (``edge``:
``composer.index.packing``) and, when the embedding model is a local folder, a copy of it. Opening puts the
saved index into a fresh work dir (linked, not copied: its arrays are mapped read-only), unpacks the shard
there (a copy: opening a shard writes to its files) and opens the pipeline on them: no corpus, no analysis,
no point upserted. A model registered before shards travelled (no ``edge``) gets its collection filled from
the saved arrays instead. A Qdrant server's collection is referenced, never copied.

``composer serve`` resolves ``models:/NAME@alias`` and ``models:/NAME/VERSION`` itself where the registry
is an SQLite file and the version's artifacts are local folders (the embedded store a study writes): two
indexed reads of the registry's tables, where importing MLflow and opening its store took 4-6 s on a
loaded 2-core machine. Anything else (another store, remote artifacts, a schema it does not know) goes
through MLflow.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import sqlite3
import sys
import tempfile
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from composer.errors import ComposerError, ConfigError
from composer.redact import scrub_url
from composer.registered.manifest import DIGEST_TAG, named, verify
from composer.secrets import check_env, read_key

if TYPE_CHECKING:
    from composer.pipeline.pipeline import Pipeline

ARTIFACTS = ("pipeline", "composer", "index")
"""The artifacts every Composer model has (``edge``, ``embedder`` and ``manifest`` are optional)."""
_PLAIN = re.compile(r"[A-Za-z0-9_.-]{1,200}")
_ALLOW_MODIFIED = [False]
"""Whether ``allow_modified_models`` let this process load modified models."""


def open_pipeline(artifacts: Mapping[str, str], *, allow_modified: bool | None = None) -> Pipeline:
    """The pipeline of the model whose artifacts (name -> local path) are ``artifacts``, opened in a fresh
    work dir (see the module), removed when the process exits. Everything the model's files name is
    checked before anything is created or read from the environment: the names of its index and
    collection, its key variables (``composer.secrets``), its files against the manifest registered with
    it (``composer.registered.manifest``; ``allow_modified`` None: as ``allow_modified_models`` set it)."""
    from composer.pipeline.saved import RECORD, read_record

    config = _json(Path(artifacts["pipeline"]))
    reference = _json(Path(artifacts["composer"]))
    server = reference.get("qdrant")
    if server is not None:
        server = _server(server, Path(artifacts["composer"]))
    for field, name in named(config, "api_key_env"):
        check_env(name, field=field, path=artifacts["pipeline"])
    index = Path(artifacts["index"]).resolve()
    record = read_record(index)
    _plain_name(record.get("key"), index / RECORD, "key")
    verify(artifacts, config, server, expected=registered_digest(Path(artifacts["pipeline"]).parent.parent),
           allow_modified=_ALLOW_MODIFIED[0] if allow_modified is None else allow_modified)
    workdir = Path(tempfile.mkdtemp(prefix="composer-model-"))
    try:
        pipe = _open(artifacts, config, server, index, record, workdir)
    except BaseException:
        _remove(None, workdir)
        raise
    atexit.register(_remove, pipe, workdir)
    return pipe


def allow_modified_models(allow: bool = True) -> None:
    """Let this process load registered models whose config files, endpoints or key variables differ
    from what was registered (``--allow-modified-model``); their data files are still verified."""
    _ALLOW_MODIFIED[0] = allow


def _json(path: Path) -> dict[str, Any]:
    """A model's JSON file as a mapping; one line naming it when it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ComposerError(f"the model's {path} is unreadable: {type(exc).__name__}: {exc}") from None
    if not isinstance(data, dict):
        raise ComposerError(f"the model's {path} is not a JSON object")
    return data


def _server(server: Any, path: Path) -> dict[str, str]:
    """``composer.json``'s Qdrant reference, its collection a plain name and its key variable allowed."""
    if not isinstance(server, dict) or not all(isinstance(server.get(k), str) for k in ("url", "collection")):
        raise ConfigError("expected url and collection", path=path, field="qdrant")
    if not str(server["url"]).startswith(("http://", "https://")):
        raise ConfigError("not an http(s):// URL", path=path, field="qdrant.url")
    _plain_name(server["collection"], path, "qdrant.collection")
    key_env = server.get("api_key_env")
    if key_env is not None:
        if not isinstance(key_env, str):
            raise ConfigError("must name an environment variable", path=path, field="qdrant.api_key_env")
        check_env(key_env, field="qdrant.api_key_env", path=path)
    return dict(server)


def _plain_name(name: Any, path: Path, field: str) -> str:
    """A name the model gives a folder or collection: one plain path component, or refused before
    anything is created (an absolute or ``..`` name would put it outside the work dir)."""
    if not isinstance(name, str) or not _PLAIN.fullmatch(name) or name in (".", ".."):
        raise ConfigError(f"{name!r} is not a plain index name (letters, digits, '.', '_', '-')", path=path,
                          field=field)
    return name


def registered_digest(model_dir: Path, registry: str | None = None) -> str | None:
    """The manifest digest registered for the model saved as ``model_dir``, read from an SQLite registry
    (``_sqlite_registry``); None where there is none or another store holds the registry."""
    db = _sqlite_registry(registry)
    if db is None:
        return None
    try:
        with closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as conn:
            rows = conn.execute("SELECT v.storage_location, t.value FROM model_version_tags t JOIN "
                                "model_versions v ON t.name = v.name AND t.version = v.version WHERE "
                                "t.key = ?", (DIGEST_TAG,)).fetchall()
    except sqlite3.Error:
        return None
    here = model_dir.resolve()
    for where, value in rows:
        local = unquote(urlparse(str(where)).path) if str(where).startswith("file://") else str(where)
        if local and Path(local).resolve() == here:
            return str(value)
    return None


def _remove(pipe: Pipeline | None, workdir: Path) -> None:
    """A model's work dir removed, its shards closed first."""
    if pipe is not None:
        pipe.workspace.close()
    shutil.rmtree(workdir, ignore_errors=True)


def _open(artifacts: Mapping[str, str], config: dict[str, Any], server: dict[str, Any] | None, index: Path,
          record: dict[str, Any], workdir: Path) -> Pipeline:
    from composer.index import EdgeBackend
    from composer.pipeline.pipeline import Pipeline
    from composer.pipeline.saved import RECORD, SAVED_DIR

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
    if server is None:
        if artifacts.get("edge"):
            EdgeBackend(workdir / "qdrant").import_shard(record["key"], Path(artifacts["edge"]))
        return _opened(Pipeline.from_config(config, workdir=workdir))
    key_env = server.get("api_key_env")
    # No key variable: no key at all, never $QDRANT_API_KEY sent to an address the model names.
    api_key = read_key(key_env, field="qdrant.api_key_env", path=artifacts["composer"]) if key_env else ""
    url = scrub_url(server["url"])
    try:
        pipe = Pipeline.from_config(config, workdir=workdir, qdrant=server["url"], api_key=api_key)
        if not pipe.workspace.backend.exists(server["collection"]):
            raise ComposerError(f"the model's index is the collection {server['collection']!r} on {url} "
                                "(referenced, not copied), which is absent or unfinished there (API key from "
                                f"${key_env})")
        return _opened(pipe)
    except ComposerError:
        raise
    except Exception as exc:
        if not _unreachable(exc):
            raise
        raise ComposerError(f"the Qdrant server {url} named by the model's {artifacts['composer']} cannot be "
                            f"reached: {type(exc).__name__}: {scrub_url(str(exc)).splitlines()[0]}") from None


def _opened(pipe: Pipeline) -> Pipeline:
    pipe.handle  # noqa: B018 -- opened now: a broken model fails at load, not at the first question
    return pipe


def _unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` is qdrant-client's way of saying its server did not answer (or answered badly)."""
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

    return isinstance(exc, ResponseHandlingException | UnexpectedResponse | OSError)


def composer_artifacts(model_dir: Path) -> dict[str, str] | None:
    """The artifacts (name -> local path) of the Composer model saved as ``model_dir`` (an MLflow model
    folder: ``MLmodel`` and its files); None for any other model."""
    import yaml

    try:
        spec = yaml.safe_load((model_dir / "MLmodel").read_text(encoding="utf-8"))
        pyfunc = spec["flavors"]["python_function"]
        ours = "composer" in (spec.get("metadata") or {})
        if pyfunc.get("loader_module") != "mlflow.pyfunc.model" or not ours:
            return None
        entries = pyfunc.get("artifacts") or {}
        found = {name: str(model_dir / entry["path"]) for name, entry in entries.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, yaml.YAMLError):
        return None
    if not all(name in found and Path(found[name]).exists() for name in ARTIFACTS):
        return None
    return found


def registered_folder(uri: str, registry: str | None = None) -> Path | None:
    """The local folder of the model version ``uri`` (``models:/NAME@alias`` or ``models:/NAME/VERSION``)
    read straight from an SQLite registry (``registry``, default MLflow's: see ``_sqlite_registry``), or
    None where MLflow must resolve it."""
    db = _sqlite_registry(registry)
    if db is None or not uri.startswith("models:/"):
        return None
    name, sep, alias = uri[len("models:/"):].rstrip("/").partition("@")
    if not sep:
        name, sep, version = name.rpartition("/")
        if not sep or not version.isdigit():
            return None
    try:
        with closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as conn:
            if alias:
                rows = conn.execute("SELECT version FROM registered_model_aliases WHERE name = ? AND "
                                    "alias = ?", (name, alias)).fetchall()
                if len(rows) != 1:
                    return None
                version = str(rows[0][0])
            rows = conn.execute("SELECT storage_location, status, current_stage FROM model_versions "
                                "WHERE name = ? AND version = ?", (name, int(version))).fetchall()
    except (sqlite3.Error, ValueError):
        return None
    if len(rows) != 1 or rows[0][1] != "READY" or rows[0][2] == "Deleted_Internal" or not rows[0][0]:
        return None
    where = str(rows[0][0])
    if where.startswith("file://"):
        parsed = urlparse(where)
        if parsed.netloc not in ("", "localhost"):
            return None
        where = unquote(parsed.path)
    folder = Path(where)
    return folder if folder.is_absolute() and (folder / "MLmodel").is_file() else None


def _sqlite_registry(uri: str | None = None) -> Path | None:
    """The SQLite file of registry ``uri``, by default MLflow's registry URI when MLflow is imported
    already, else ``$MLFLOW_REGISTRY_URI`` or ``$MLFLOW_TRACKING_URI``; None for any other store or none
    set (MLflow's default store is left to MLflow)."""
    if uri is None:
        mlflow = sys.modules.get("mlflow")
        if mlflow is not None:
            uri = str(mlflow.get_registry_uri())
        else:
            uri = os.environ.get("MLFLOW_REGISTRY_URI") or os.environ.get("MLFLOW_TRACKING_URI") or ""
    if not uri.startswith("sqlite:///"):
        return None
    path = Path(unquote(uri[len("sqlite:///"):].split("?", 1)[0]))
    return path.resolve() if path.name and path.is_file() else None
