"""The winner as a registered MLflow model: `composer export --register NAME --promote` logs a pyfunc model
that carries its index, so `models:/NAME@champion` answers in a fresh process with the study's work dir
and corpus gone, through `mlflow.pyfunc`, `mlflow models serve` and `composer serve`'s loader."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from sample_study import SAMPLE, write_experiment, write_sample_study, write_space
from tiny_models import ARABIC_PIECES, save_tiny_sentence_transformer
from typer.testing import CliRunner

from composer.cli.app import app
from composer.errors import ConfigError, InputError
from composer.study.experiment import load_experiment

SPACE = """
dimensions:
  retrieval.mode: {choices: [bm25]}
  retrieval.k: {choices: [3, 5]}
"""
EXPERIMENT = """
name: reg
corpus: {corpus}
questions: questions.jsonl
search_space: space.yaml
objective: {{k: 5, metrics: {{recall: 1, token_f1: 1}}}}
sampler: {{name: random, seed: 0}}
split: {{held_out: 0.3, seed: 1}}
"""
QUESTION = "متى ولد جمال خاشقجي؟"
LOAD = """
import json, sys
import mlflow.pyfunc
model = mlflow.pyfunc.load_model(sys.argv[1])
import pandas as pd
rows = model.predict([sys.argv[2]])
assert model.predict(pd.DataFrame({"question": [sys.argv[2]]})) == rows
print(json.dumps(rows, ensure_ascii=False))
"""


def _env(tracking: str) -> dict[str, str]:
    """The environment of a fresh process on ``tracking``, this venv's scripts (uvicorn) on its PATH."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "MLFLOW_TRACKING_URI": tracking, "HF_HUB_OFFLINE": "1", "PATH": path}


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A finished study registered as `qa-model` and promoted: (tracking URI, work dir)."""
    root = tmp_path_factory.mktemp("study")
    shutil.copy(SAMPLE / "corpus.jsonl", root / "corpus.jsonl")  # a copy, to be moved away
    experiment = EXPERIMENT.replace("{corpus}", "corpus.jsonl")
    exp_file = write_sample_study(root, space=SPACE, experiment=experiment, n_questions=20)
    runner = CliRunner()
    result = runner.invoke(app, ["optimize", str(exp_file), "--n-trials", "2"])
    assert result.exit_code == 0, result.output
    exp = load_experiment(exp_file)
    result = runner.invoke(app, ["export", "reg", "-e", str(exp_file), "--register", "qa-model", "--promote"])
    assert result.exit_code == 0, result.output
    assert "registered as models:/qa-model/1 (challenger, champion)" in result.output
    return exp.tracking_uri, exp.work_dir


@pytest.mark.slow
def test_registry_entry_carries_aliases_tags_and_requirements(
    registered: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlflow.pyfunc
    from mlflow import MlflowClient

    from composer.version import composer_version

    tracking, _ = registered
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking)
    requirements = Path(mlflow.pyfunc.get_model_dependencies("models:/qa-model@champion")).read_text("utf-8")
    assert f"composer-rag=={composer_version()}" in requirements and "mlflow==" in requirements
    outputs = mlflow.models.get_model_info("models:/qa-model@champion").signature.outputs.input_names()
    assert outputs == ["answer", "contexts", "hits", "citations", "language", "refusal"]
    client = MlflowClient(tracking)
    champion = client.get_model_version_by_alias("qa-model", "champion")
    assert client.get_model_version_by_alias("qa-model", "challenger").version == champion.version
    tags = champion.tags
    assert tags["composer.study"] == "reg" and tags["composer.trial"].isdigit()
    assert tags["composer.corpus_fingerprint"] not in ("", "None")
    assert float(tags["composer.held_out_composite"]) >= 0
    assert tags["composer.held_out_verdict"]
    assert tags["composer.embedder"] == "none (BM25 only)"
    assert tags["composer.index"].startswith("copied: saved index (")
    objective = {"k_eval": 5, "weights": {"recall@5": 0.5, "token_f1": 0.5}}  # the experiment's, normalized
    assert json.loads(tags["composer.objective"]) == objective
    assert float(tags["composer.selection_composite"]) > 0
    for key in ("questions_fingerprint", "selection_fingerprint", "index_key"):
        assert tags[f"composer.{key}"] not in ("", "None")
    description = str(champion.description)
    assert "Held-out composite" in description and tags["composer.held_out_verdict"] in description
    assert tags["composer.corpus_fingerprint"] in description and "Index: copied" in description
    run = client.get_run(str(champion.run_id))
    assert run.data.tags["composer.trial"] == tags["composer.trial"]
    # logging the model reopened the trial's run: it still ends when the trial did, before registration
    assert run.info.status == "FINISHED" and run.info.end_time < champion.creation_timestamp


@pytest.mark.slow
def test_champion_answers_in_a_fresh_process_without_work_dir_or_corpus(
    registered: tuple[str, Path], tmp_path: Path
) -> None:
    import mlflow.pyfunc

    from composer.api import load_pipeline

    tracking, workdir = registered
    os.environ["MLFLOW_TRACKING_URI"] = tracking
    try:
        model = mlflow.pyfunc.load_model("models:/qa-model@champion")
        config = json.loads((Path(model._model_impl.context.artifacts["pipeline"])).read_text("utf-8"))
    finally:
        del os.environ["MLFLOW_TRACKING_URI"]
    pipe = load_pipeline(config, workdir=workdir)
    expected, answer = pipe.search(QUESTION), pipe.ask(QUESTION).text
    # all but the MLflow store (database and artifacts) moved away: indexes, caches, Qdrant, corpus
    away = [workdir / name for name in ("indexes", "cache", "qdrant", "optuna.db")] + [
        workdir.parent / "corpus.jsonl"]
    for path in away:
        shutil.move(path, tmp_path / f"away-{path.name}")
    try:
        out = subprocess.run([sys.executable, "-c", LOAD, "models:/qa-model@champion", QUESTION],
                             cwd=tmp_path, env=_env(tracking), capture_output=True, text=True, timeout=120)
    finally:
        for path in away:
            shutil.move(tmp_path / f"away-{path.name}", path)
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(row) == {"answer", "contexts", "hits", "citations", "language", "refusal"}
    assert [h["id"] for h in row["hits"]] == [h.id for h in expected]
    assert row["answer"] == answer
    assert row["language"] == "ar"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_mlflow_models_serve_answers_invocations(registered: tuple[str, Path], tmp_path: Path) -> None:
    tracking, _ = registered
    mlflow_cli = Path(sys.executable).with_name("mlflow")
    if not mlflow_cli.exists():
        pytest.skip("the mlflow CLI is not installed beside this Python")
    port = _free_port()
    server = subprocess.Popen([str(mlflow_cli), "models", "serve", "-m", "models:/qa-model@champion",
                               "--env-manager", "local", "--host", "127.0.0.1", "--port", str(port)],
                              cwd=tmp_path, env=_env(tracking), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    try:
        body = json.dumps({"inputs": [QUESTION]}).encode()
        deadline = time.monotonic() + 90
        while True:
            try:
                request = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", body,
                                                 {"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=30) as reply:
                    answer = json.loads(reply.read())
                break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode() if server.stderr else ""
                assert time.monotonic() < deadline, "mlflow models serve did not answer in 90 s"
                time.sleep(0.5)
    finally:
        server.terminate()
        server.wait(timeout=30)
    (row,) = answer["predictions"]
    assert row["answer"] and row["hits"]


@pytest.mark.slow
def test_composer_serve_loads_the_models_uri(
    registered: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from composer.serve.engine import PipelineEngine, load_engine

    tracking, _ = registered
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking)
    engine = load_engine("models:/qa-model@champion")
    assert isinstance(engine, PipelineEngine)
    assert engine.search(QUESTION, 3).value


@pytest.mark.slow
def test_composer_serve_answers_a_registered_models_follow_ups_with_their_history(
    registered: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registered winner's ``conversation:`` stage serves chats: "and when was he born?" alone finds
    another passage; after "who is Jamal Khashoggi?" it finds his, plain, streamed and through ``predict``."""
    import mlflow.pyfunc
    from fastapi.testclient import TestClient

    from composer.serve import create_app, load_engine

    tracking, _ = registered
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking)
    first, follow_up = "من هو جمال أحمد حمزة خاشقجي؟", "متى ولد؟"
    app = TestClient(create_app(load_engine("models:/qa-model@champion")))
    alone = app.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": follow_up}]})
    assert not alone.json()["citations"][0].startswith("arcd-000")
    chat = [{"role": "user", "content": first}, {"role": "assistant", "content": "صحفي سعودي."},
            {"role": "user", "content": follow_up}]
    plain = app.post("/v1/chat/completions", json={"messages": chat}).json()
    assert plain["citations"][0] == "arcd-000-0"
    streamed = [line for line in app.post("/v1/chat/completions", json={"messages": chat, "stream": True})
                .text.split("\n\n") if line]
    assert json.loads(streamed[-2][len("data: "):])["citations"][0] == "arcd-000-0"
    model = mlflow.pyfunc.load_model("models:/qa-model@champion").unwrap_python_model()
    asked = {"question": follow_up, "history": [{"role": "user", "text": first}]}
    rows = model.predict(None, [asked, follow_up])
    assert rows[0]["hits"][0]["doc_id"] == "arcd-000-0" != rows[1]["hits"][0]["doc_id"]


@pytest.mark.slow
@pytest.mark.parametrize(("args", "message"), [
    (["--register", "bad/name"], "a model name is"),
    (["--promote"], "--register NAME"),
])
def test_bad_register_exits_2_with_one_line(registered: tuple[str, Path], args: list[str], message: str,
                                            tmp_path: Path) -> None:
    exp_file = write_sample_study(tmp_path, space=SPACE, experiment=EXPERIMENT, n_questions=5)
    result = CliRunner().invoke(app, ["export", "reg", "-e", str(exp_file), *args])
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1


def test_study_without_a_finished_trial_exits_2(tmp_path: Path) -> None:
    import optuna

    exp_file = write_sample_study(tmp_path, space=SPACE, experiment=EXPERIMENT, n_questions=5)
    exp = load_experiment(exp_file)
    exp.work_dir.mkdir(parents=True, exist_ok=True)
    optuna.create_study(study_name="reg", storage=exp.storage_url)
    result = CliRunner().invoke(app, ["export", "reg", "-e", str(exp_file), "--register", "qa-model"])
    assert result.exit_code == 2
    assert "no completed trial" in result.output and len(result.output.strip().splitlines()) == 1


@pytest.mark.slow
def test_eval_config_reopens_the_saved_index_without_corpus(
    registered: tuple[str, Path], tmp_path: Path
) -> None:
    _, workdir = registered
    exp_file = workdir.parent / "experiment.yaml"
    best = tmp_path / "best.yaml"
    runner = CliRunner()
    assert runner.invoke(app, ["export", "reg", "-e", str(exp_file), "-o", str(best)]).exit_code == 0
    args = ["eval", str(workdir.parent / "questions.jsonl"), "--config", str(best), "--workdir", str(workdir),
            "--json"]
    without = runner.invoke(app, args)
    assert without.exit_code == 0, without.output
    indexed = runner.invoke(app, [*args, "--corpus", str(SAMPLE / "corpus.jsonl")])
    assert indexed.exit_code == 0, indexed.output
    scores = json.loads(without.stdout)["metrics"]
    assert scores["recall@5"] > 0 and scores == json.loads(indexed.stdout)["metrics"]


@pytest.mark.slow
def test_study_result_registers_from_python(tmp_path: Path) -> None:
    from mlflow import MlflowClient

    import composer

    experiment = EXPERIMENT.replace("name: reg", "name: py")
    exp_file = write_sample_study(tmp_path, space=SPACE, experiment=experiment, n_questions=10)
    result = composer.optimize(str(exp_file), n_trials=1)
    done = result.register("py-model")
    assert (done.name, done.version, done.promoted) == ("py-model", "1", False)
    client = MlflowClient(result.tracking_uri)
    assert str(client.get_model_version_by_alias("py-model", "challenger").version) == "1"
    with pytest.raises(Exception, match="champion"):
        client.get_model_version_by_alias("py-model", "champion")


def test_a_qdrant_server_index_is_referenced_not_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """qdrant-client's ``:memory:`` stands in for the server: the model records the URL, the collection and
    the key's variable (never the key), and loading opens that collection instead of building one."""
    import composer.pipeline.workspace as workspace
    from composer.data import load_corpus
    from composer.errors import ComposerError
    from composer.index import ClientBackend
    from composer.pipeline.pipeline import Pipeline
    from composer.registered.mlflow_model import open_pipeline
    from composer.study.registry import Where, _artifacts

    config = {"retrieval": {"mode": "bm25", "k": 5}}
    built = Pipeline.from_config(config, workdir=tmp_path / "work", qdrant=":memory:")
    built.index(load_corpus(SAMPLE / "corpus.jsonl"))
    server, key, url = built.workspace.backend, built.handle.key, "https://qdrant.example:6333"
    assert isinstance(server, ClientBackend)
    (tmp_path / "model").mkdir()
    where = Where("", "", tmp_path / "work", url)
    model = _artifacts(tmp_path / "model", config, tmp_path / "work" / "indexes" / key, where)
    reference = json.loads((tmp_path / "model" / "composer.json").read_text("utf-8"))
    assert reference == {"qdrant": {"url": url, "collection": key, "api_key_env": "QDRANT_API_KEY"}}
    assert model.tags["composer.index"].startswith(f"referenced: collection {key} on {url}")
    build = server.client.get_collection(key).config.metadata["composer"]["build"]
    opened: list[tuple[str | None, str | None]] = []

    def the_server(location: str | None, workdir: Path, api_key: str | None = None) -> ClientBackend:
        opened.append((location, api_key))
        return server

    monkeypatch.setattr(workspace, "open_index", the_server)
    monkeypatch.setenv("QDRANT_API_KEY", "key-from-env")
    monkeypatch.delenv("COMPOSER_ALLOW_ENV", raising=False)
    with pytest.raises(ConfigError, match="--allow-env QDRANT_API_KEY"):  # the model cannot allow it
        open_pipeline(model.files)
    assert opened == []
    monkeypatch.setenv("COMPOSER_ALLOW_ENV", "QDRANT_API_KEY")
    pipe = open_pipeline(model.files)
    assert opened == [(url, "key-from-env")]
    assert [h.id for h in pipe.search(QUESTION)] == [h.id for h in built.search(QUESTION)]
    assert server.client.get_collection(key).config.metadata["composer"]["build"] == build  # not rebuilt
    server.drop(key)
    with pytest.raises(ComposerError, match=f"collection '{key}' on {url} \\(referenced, not copied\\)"):
        open_pipeline(model.files)
    assert not server.client.collection_exists(key)  # the model never builds on the server
    with pytest.raises(InputError, match="carries a secret"):
        _artifacts(tmp_path / "model", config, tmp_path / "work" / "indexes" / key,
                   Where("", "", tmp_path / "work", "https://user:pw@qdrant.example"))


@pytest.mark.slow
def test_a_local_embedding_model_is_copied_into_the_model(tmp_path: Path) -> None:
    """A dense winner whose embedding model is a local folder answers with the same hits in a fresh process
    after the work dir, the corpus and that folder are moved away: the model carries a copy of it."""
    from mlflow import MlflowClient

    from composer.api import load_pipeline

    tiny = save_tiny_sentence_transformer(tmp_path / "models", ARABIC_PIECES)
    shutil.copy(SAMPLE / "corpus.jsonl", tmp_path / "corpus.jsonl")
    dims = {"retrieval.mode": {"choices": ["dense"]}, "retrieval.k": {"choices": [5]}}
    exp_file = write_experiment(tmp_path, dims=dims, n_questions=5, name="dense", corpus="corpus.jsonl")
    write_space(tmp_path, dims, defaults={"embedding": {"provider": "sentence-transformers",
                                                        "model": str(tiny)}})
    runner = CliRunner()
    result = runner.invoke(app, ["optimize", str(exp_file), "--n-trials", "1"])
    assert result.exit_code == 0, result.output
    best = tmp_path / "best.yaml"
    result = runner.invoke(app, ["export", "dense", "-e", str(exp_file), "--register", "dense-model", "-o",
                                 str(best)])
    assert result.exit_code == 0, result.output
    size = sum(f.stat().st_size for f in tiny.rglob("*") if f.is_file())
    assert f"embedding model: copied from local folder tiny-bert ({size / 1e6:.1f} MB)" in result.output
    exp = load_experiment(exp_file)
    version = MlflowClient(exp.tracking_uri).get_model_version_by_alias("dense-model", "challenger")
    assert version.tags["composer.embedder_bytes"] == str(size)
    assert "copied from local folder tiny-bert" in str(version.description)
    expected = [h.id for h in load_pipeline(best, workdir=exp.work_dir).search(QUESTION)]
    away = [exp.work_dir / name for name in ("indexes", "cache", "qdrant")] + [
        tmp_path / "corpus.jsonl", tmp_path / "models"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for path in away:
        shutil.move(path, elsewhere / path.name)
    out = subprocess.run([sys.executable, "-c", LOAD, "models:/dense-model@challenger", QUESTION],
                         cwd=elsewhere, env=_env(exp.tracking_uri), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout.strip().splitlines()[-1])
    assert [h["id"] for h in row["hits"]] == expected and len(set(h["score"] for h in row["hits"])) > 1


def _model_artifacts(tracking: str, uri: str = "models:/qa-model@champion") -> dict[str, str]:
    """The registered model's artifacts (name -> local path), found the way `composer serve` finds them."""
    from composer.registered.model_files import composer_artifacts, registered_folder

    folder = registered_folder(uri, tracking)
    assert folder is not None, "an SQLite registry with local artifacts is read without MLflow"
    artifacts = composer_artifacts(folder)
    assert artifacts is not None
    return artifacts


def _before_manifests(artifacts: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The artifacts of a model registered before manifests (nothing to verify its files against), so
    that a test may swap one of them for another."""
    import composer.registered.model_files as model_files

    monkeypatch.setattr(model_files, "registered_digest", lambda *args: None)
    return {k: v for k, v in artifacts.items() if k != "manifest"}


@pytest.mark.slow
def test_the_model_carries_its_finished_shard_and_loading_upserts_nothing(
    registered: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Edge shard travels packed (holes left out: a few KB, not the 137 MB its preallocated files
    would copy to) and loading opens a copy of it: not one point is upserted, whatever the corpus size.
    A model without it (registered before shards travelled) still loads, its collection refilled."""
    from composer.api import load_pipeline
    from composer.index import EdgeBackend
    from composer.registered.model_files import open_pipeline

    tracking, workdir = registered
    artifacts = _model_artifacts(tracking)
    assert "manifest" in artifacts
    edge = Path(artifacts["edge"])
    assert sum(f.stat().st_size for f in edge.iterdir()) < 2_000_000
    config = json.loads(Path(artifacts["pipeline"]).read_text("utf-8"))
    expected = [h.id for h in load_pipeline(config, workdir=workdir).search(QUESTION)]
    upserted: list[int] = []
    real_upsert = EdgeBackend.upsert

    def counted(self: EdgeBackend, name: str, chunks: Any, *args: Any) -> None:
        upserted.append(len(chunks))
        real_upsert(self, name, chunks, *args)

    monkeypatch.setattr(EdgeBackend, "upsert", counted)
    pipe = open_pipeline(artifacts)
    assert upserted == [] and [h.id for h in pipe.search(QUESTION)] == expected
    assert not (edge / "shard").exists()  # the pack is copied out, never opened in place
    old = open_pipeline(_before_manifests({k: v for k, v in artifacts.items() if k != "edge"}, monkeypatch))
    assert sum(upserted) == len(old.handle.table) and [h.id for h in old.search(QUESTION)] == expected


@pytest.mark.slow
def test_a_shard_that_does_not_match_the_saved_index_is_rebuilt_from_it(
    registered: tuple[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from composer.index.packing import pack_folder, unpack_folder
    from composer.registered.model_files import open_pipeline

    tracking, _ = registered
    artifacts = _model_artifacts(tracking)
    unpack_folder(Path(artifacts["edge"]), tmp_path / "shard")
    meta = json.loads((tmp_path / "shard" / "meta.json").read_text("utf-8"))
    meta["meta"]["digest"]["chunks"] = "0" * 32  # built from other chunks, its record says
    (tmp_path / "shard" / "meta.json").write_text(json.dumps(meta), "utf-8")
    pack_folder(tmp_path / "shard", tmp_path / "edge")
    healthy = open_pipeline(artifacts)
    pipe = open_pipeline({**_before_manifests(artifacts, monkeypatch), "edge": str(tmp_path / "edge")})
    assert "rebuilding it" in caplog.text
    assert [h.id for h in pipe.search(QUESTION)] == [h.id for h in healthy.search(QUESTION)]


@pytest.mark.slow
def test_a_study_that_left_no_shard_registers_one_built_from_its_saved_index(
    registered: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A work dir without the collection (a ``:memory:`` study, or its shard in use by another process):
    the shard is built at registration from the saved index, not at every load."""
    from composer.index import EdgeBackend
    from composer.registered.model_files import open_pipeline
    from composer.study.registry import _pack_shard

    tracking, _ = registered
    artifacts = _model_artifacts(tracking)
    index = Path(artifacts["index"])
    work = tmp_path / "work"
    shutil.copytree(index, work / "indexes" / index.name)
    assert _pack_shard(work, work / "indexes" / index.name, tmp_path / "edge") > 0
    assert not (work / "qdrant").exists()  # built in a scratch folder, not in the study's work dir

    def refused(*args: Any) -> None:
        raise AssertionError("a model load upserted points")

    expected = [h.id for h in open_pipeline(artifacts).search(QUESTION)]
    monkeypatch.setattr(EdgeBackend, "upsert", refused)
    pipe = open_pipeline({**_before_manifests(artifacts, monkeypatch), "edge": str(tmp_path / "edge")})
    assert [h.id for h in pipe.search(QUESTION)] == expected


SERVE_LOAD = """
import sys
import composer.index.edge as edge
def refused(*args, **kwargs):
    raise AssertionError("a model load upserted points")
edge.EdgeBackend.upsert = refused
from composer.serve.engine import PipelineEngine, load_engine
engine = load_engine(sys.argv[1])
assert isinstance(engine, PipelineEngine) and engine.ask(sys.argv[2]).value.answer
print("mlflow imported" if "mlflow" in sys.modules else "mlflow not imported")
"""


@pytest.mark.slow
def test_composer_serve_opens_a_local_registry_model_without_mlflow(
    registered: tuple[str, Path], tmp_path: Path
) -> None:
    """`composer serve models:/...` on the embedded store reads the registry and opens the model's files
    itself: importing MLflow and opening its store took most of a 17 s start."""
    tracking, _ = registered
    for uri in ("models:/qa-model@champion", "models:/qa-model/1"):
        out = subprocess.run([sys.executable, "-c", SERVE_LOAD, uri, QUESTION], cwd=tmp_path,
                             env=_env(tracking), capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip().splitlines()[-1] == "mlflow not imported"


def test_packed_folders_keep_contents_and_holes(tmp_path: Path) -> None:
    from composer.index.packing import BLOCK, pack_folder, unpack_folder

    source = tmp_path / "source"
    (source / "wal").mkdir(parents=True)
    (source / "empty").mkdir()
    sparse = source / "wal" / "open-1"
    with open(sparse, "wb") as f:
        f.truncate(8 * BLOCK)  # preallocated: a hole with a little data in it
        f.seek(3 * BLOCK + 5)
        f.write(b"data in the middle")
    (source / "small.json").write_bytes(b'{"x": 1}')
    (source / "zeros.bin").write_bytes(bytes(2 * BLOCK + 3))
    packed = pack_folder(source, tmp_path / "pack")
    assert packed < 2 * BLOCK  # the holes and zero blocks are left out
    unpack_folder(tmp_path / "pack", tmp_path / "copy")
    for path in [p for p in source.rglob("*") if p.is_file()]:
        assert (tmp_path / "copy" / path.relative_to(source)).read_bytes() == path.read_bytes()
    assert (tmp_path / "copy" / "empty").is_dir()
    assert os.stat(tmp_path / "copy" / "wal" / "open-1").st_blocks * 512 < 2 * BLOCK  # sparse again
    with pytest.raises(FileExistsError):
        unpack_folder(tmp_path / "pack", tmp_path / "copy")


@pytest.mark.slow
def test_the_registry_records_a_digest_of_every_file_and_loading_checks_it(
    registered: tuple[str, Path], tmp_path: Path
) -> None:
    """Registration records the manifest's digest, endpoints and key variables as tags; a registered
    model's file changed in place is refused at load, naming the file, and so is a rewritten manifest."""
    import mlflow
    from mlflow import MlflowClient

    from composer.errors import ComposerError
    from composer.registered.manifest import DIGEST_TAG, ENDPOINTS_TAG, KEY_ENV_TAG, sha256
    from composer.registered.model_files import open_pipeline, registered_digest

    tracking, _ = registered
    mlflow.set_tracking_uri(tracking)  # the registry a load consults, as `composer serve` sets it
    artifacts = _model_artifacts(tracking)
    tags = MlflowClient(tracking).get_model_version_by_alias("qa-model", "champion").tags
    assert tags[DIGEST_TAG] == sha256(Path(artifacts["manifest"]))
    assert (tags[ENDPOINTS_TAG], tags[KEY_ENV_TAG]) == ("none", "none")
    assert registered_digest(Path(artifacts["pipeline"]).parent.parent, tracking) == tags[DIGEST_TAG]
    for name in ("manifest", "index"):
        path = Path(artifacts[name]) if name == "manifest" else Path(artifacts[name]) / "chunks.json"
        original = path.read_bytes()
        try:
            path.write_bytes(original.replace(b"\xd9", b"\xd8", 1) if name == "index" else original + b" ")
            with pytest.raises(ComposerError, match="differs"):
                open_pipeline(artifacts)
        finally:
            path.write_bytes(original)


class _NotServing:
    """Stands in for the HTTP server: `composer serve` loads its model, then returns."""

    started = should_exit = False

    def run(self) -> None:
        pass


@pytest.mark.slow
def test_register_prints_the_store_that_serve_reads_and_serve_finds_it_from_the_study(
    registered: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 42, point 8: `export --register` says which store a later `serve` reads; `serve -e` or
    `--workdir` reads the study's store without $MLFLOW_TRACKING_URI."""
    import shlex

    from test_serving_faults5 import unset_mlflow_store

    import composer.serve.guard

    tracking, workdir = registered
    exp_file = workdir.parent / "experiment.yaml"
    result = CliRunner().invoke(app, ["export", "reg", "-e", str(exp_file), "--register", "qa-served"])
    assert result.exit_code == 0, result.output
    (line,) = [x for x in result.output.splitlines() if "serve it with:" in x]
    assert line == f"  serve it with: MLFLOW_TRACKING_URI={shlex.quote(tracking)} composer serve " \
                   "models:/qa-served@challenger"
    monkeypatch.chdir(tmp_path)
    unset_mlflow_store(monkeypatch)
    monkeypatch.setattr(composer.serve.guard, "server", lambda *args: _NotServing())
    for where in (["-e", str(exp_file)], ["--workdir", str(workdir)]):
        served = CliRunner().invoke(app, ["serve", "models:/qa-served@challenger", *where])
        assert served.exit_code == 0, served.output
        assert "serving qa-served@challenger (" in served.output
    assert list(tmp_path.iterdir()) == []  # no ./mlflow.db


@pytest.mark.slow
def test_promote_refuses_the_held_out_loser_unless_forced(registered: tuple[str, Path]) -> None:
    """Issue 42, point 9: the held-out verdict found the runner-up really better than the winner: no
    model is registered without --force; with it the winner is promoted, and said to be the loser."""
    import optuna
    from mlflow import MlflowClient

    from composer.study.experiment import default_storage
    from composer.study.export import best_trial

    tracking, workdir = registered
    study = optuna.load_study(study_name="reg", storage=default_storage(workdir))
    winner = best_trial(study).number
    kept = study.user_attrs.get("held_out")
    lost = {"n_questions": 6, "winner": {"trial": winner, "held_out_composite": 0.4},
            "runner_up": {"trial": 1 - winner, "held_out_composite": 0.6},
            "difference": {"mean": -0.2, "ci95": [-0.3, -0.1], "n_paired": 6, "winner_really_better": False,
                           "runner_up_really_better": True}}
    study.set_user_attr("held_out", lost)
    client = MlflowClient(tracking)
    exp_file = workdir.parent / "experiment.yaml"
    args = ["export", "reg", "-e", str(exp_file), "--register", "qa-loser", "--promote"]
    try:
        refused = CliRunner().invoke(app, args)
        assert refused.exit_code == 2 and len(refused.output.strip().splitlines()) == 1, refused.output
        assert f"not promoting #{winner}" in refused.output
        assert f"--trial {1 - winner} --promote" in refused.output
        assert not client.search_registered_models("name = 'qa-loser'")
        forced = CliRunner().invoke(app, [*args, "--force"])
        assert forced.exit_code == 0, forced.output
        assert "promoted anyway (--force)" in forced.output
        champion = client.get_model_version_by_alias("qa-loser", "champion")
        assert champion.tags["composer.trial"] == str(winner)
    finally:
        study.set_user_attr("held_out", kept)
