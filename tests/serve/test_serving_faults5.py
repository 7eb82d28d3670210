"""`composer serve` as teams have it (issue 42, point 8): /docs whole from the server itself, offline; a
models:/ target read from the study's MLflow store, named when the model is not there, and never a store
created to read from."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlparse

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import composer.serve.app as serve_app
from composer.cli.app import app as cli
from composer.data.types import Turn
from composer.serve import create_app
from composer.serve.engine import Reply, Timed

_REFERENCE = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|url\s*[:(]\s*["']?([^"')\s]+)""")


class EchoEngine:
    """Answers every question with itself: /docs needs an engine, not a pipeline."""

    name, answerer, can_search = "echo", "test", False

    def search(self, question: str, k: int | None) -> Timed:
        raise AssertionError("not searched")

    def ask(self, question: str, history: Sequence[Turn] = ()) -> Timed:
        return Timed(Reply(question, "en"), 0.0)


def _references(text: str) -> list[str]:
    """Every URL a page or style sheet loads or links (src, href, url(...), Swagger's ``url:``)."""
    return [a or b for a, b in _REFERENCE.findall(text)]


def _fetch_all(client: TestClient) -> dict[str, str]:
    """/docs and everything it references, fetched from the server itself (path -> content type);
    asserts that every reference stays on this host."""
    page = client.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    fetched = {"/docs": page.headers["content-type"]}
    pending = _references(page.text)
    while pending:
        ref = pending.pop()
        if ref.startswith("data:") or ref in fetched:
            continue
        parsed = urlparse(ref)
        assert not parsed.scheme and not parsed.netloc, f"/docs loads {ref} from off this host"
        reply = client.get(parsed.path)
        assert reply.status_code == 200, (ref, reply.status_code)
        fetched[parsed.path] = reply.headers["content-type"]
        if reply.headers["content-type"].startswith("text/css"):
            pending += _references(reply.text)
    return fetched


def test_docs_serves_swagger_ui_and_its_files_from_the_server() -> None:
    assert serve_app.swagger_folder() is not None, "litellm, a dependency, ships Swagger UI's files"
    client = TestClient(create_app(EchoEngine()))
    fetched = _fetch_all(client)
    assert fetched["/docs/swagger-ui-bundle.js"].startswith("text/javascript")
    assert fetched["/docs/swagger-ui.css"].startswith("text/css")
    assert {"/openapi.json", "/docs/favicon.png"} <= set(fetched)
    # Swagger's default validator badge would call validator.swagger.io
    assert '"validatorUrl": null' in client.get("/docs").text
    assert client.get("/docs/../pyproject.toml").status_code == 404
    assert client.get("/docs/oauth2-redirect").status_code == 404
    assert client.get("/redoc").status_code == 404  # FastAPI's ReDoc page loads its script from a CDN


def test_docs_without_swagger_files_is_a_page_of_the_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serve_app, "swagger_folder", lambda: None)
    client = TestClient(create_app(EchoEngine()))
    assert set(_fetch_all(client)) == {"/docs", "/openapi.json"}
    page = client.get("/docs").text
    for route in ("POST /search", "POST /ask", "POST /v1/chat/completions", "GET /health", "AskRequest"):
        assert route in page
    assert client.get("/docs/swagger-ui.css").status_code == 404


def unset_mlflow_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow's variables unset, and they and MLflow's tracking URI put back after the test (`composer
    serve` sets both to the store it reads)."""
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"):
        monkeypatch.setenv(name, "")  # recorded, so that what the command sets is undone
        monkeypatch.delenv(name)
    if "mlflow" in sys.modules:
        from mlflow.tracking._tracking_service import utils

        monkeypatch.setattr(utils, "_tracking_uri", utils._tracking_uri)


@pytest.fixture
def bare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with no MLflow store, the current directory, MLflow's variables unset."""
    monkeypatch.chdir(tmp_path)
    unset_mlflow_store(monkeypatch)
    return tmp_path


def test_a_model_without_a_store_creates_none_and_says_where_it_looked(bare: Path) -> None:
    result = CliRunner().invoke(cli, ["serve", "models:/demo-rag@champion"])
    assert result.exit_code == 2, result.output
    looked = bare.resolve() / ".composer" / "mlflow.db"
    assert result.output.strip().splitlines() == [
        f"error: models:/demo-rag@champion: no MLflow store at {looked} to read it from: name the store the "
        "model was registered in with -e EXPERIMENT.yaml, --workdir (the study's work dir), --tracking-uri "
        "or $MLFLOW_TRACKING_URI"]
    assert list(bare.iterdir()) == []  # neither ./mlflow.db (MLflow's default) nor .composer/


def test_a_model_missing_from_the_work_dirs_store_names_the_store(bare: Path) -> None:
    from composer.mlflow_store import prepare_mlflow_store
    from composer.study.experiment import default_tracking_uri

    store = default_tracking_uri(bare / "study")
    prepare_mlflow_store(store)
    result = CliRunner().invoke(cli, ["serve", "models:/demo-rag@champion", "--workdir", "study"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"error: models:/demo-rag@champion: cannot load the model from the MLflow store {store}: Registered "
        "Model with name=demo-rag not found"]
    assert sorted(p.name for p in bare.iterdir()) == ["study"]


def test_experiment_is_refused_for_a_config(bare: Path) -> None:
    result = CliRunner().invoke(cli, ["serve", "best.yaml", "-e", "experiment.yaml"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: field 'experiment': applies to a models:/ or runs:/ target only (the study whose MLflow "
        "store holds it); best.yaml is a config"]
