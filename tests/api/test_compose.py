"""docker-compose.yml, checked by structure (no Docker engine here): the three shared services with pinned
images, health checks, named volumes and published ports, every variable documented in .env.example
without a real secret, and experiments/team.yaml pointing at exactly these services."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from composer.study.experiment import load_experiment

VARIABLE = re.compile(r"(?<!\$)\$\{(\w+)(?::?[-?][^}]*)?\}")


@pytest.fixture(scope="module")
def compose(repo_root: Path) -> dict[str, Any]:
    data = yaml.safe_load((repo_root / "docker-compose.yml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def published(service: dict[str, Any]) -> set[int]:
    """Host ports of ``"${BIND}:host:container"`` entries."""
    return {int(str(p).rsplit(":", 2)[-2]) for p in service.get("ports", [])}


def test_services_images_and_health(compose: dict[str, Any], repo_root: Path) -> None:
    services = compose["services"]
    assert set(services) == {"postgres", "mlflow", "qdrant", "ray-head", "ray-worker"}
    for name, service in services.items():
        image = service["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name}: pin the image version"
        check = service["healthcheck"]
        assert check["test"][0] in ("CMD", "CMD-SHELL") and len(check["test"]) > 1
        assert {"interval", "timeout", "retries"} <= set(check)
        assert service["restart"] == "unless-stopped"
    assert published(services["postgres"]) == {5432}
    assert published(services["mlflow"]) == {5000}
    assert published(services["qdrant"]) == {6333, 6334}
    # Published on loopback unless the team opens them on purpose.
    for service in services.values():
        assert all(str(p).startswith("${COMPOSER_BIND:-127.0.0.1}:") for p in service.get("ports", []))

    # MLflow waits for a healthy PostgreSQL and keeps its runs in its own database there.
    mlflow = services["mlflow"]
    assert mlflow["depends_on"]["postgres"]["condition"] == "service_healthy"
    store = mlflow["environment"]["MLFLOW_BACKEND_STORE_URI"]
    assert store.startswith("postgresql+psycopg2://") and store.endswith("@postgres:5432/mlflow")
    init = services["postgres"]["volumes"][1].split(":")[0]
    assert "CREATE DATABASE mlflow" in (repo_root / init).read_text(encoding="utf-8")
    assert services["postgres"]["environment"]["POSTGRES_DB"] == "optuna"
    # Its image is built with the PostgreSQL driver and the MLflow major version Composer talks to.
    dockerfile = (repo_root / mlflow["build"]["context"] / "Dockerfile").read_text(encoding="utf-8")
    server = re.search(r"mlflow==(\d+)\.(\d+)\.(\d+)", dockerfile)
    assert server is not None and "psycopg2-binary==" in dockerfile
    assert mlflow["image"].endswith(":" + ".".join(server.groups()))
    assert server.group(1) == importlib.metadata.version("mlflow").split(".")[0]
    assert "--serve-artifacts" in mlflow["command"]


def test_the_ray_services_run_composer_on_the_ray_it_installs(
    compose: dict[str, Any], repo_root: Path
) -> None:
    """The Ray head and workers (profile ``ray``): one image with Composer on the Ray version it installs,
    the dashboard published on COMPOSER_BIND, the workers joining the head, the experiment files mounted
    at the same path on every node."""
    head, worker = compose["services"]["ray-head"], compose["services"]["ray-worker"]
    assert head["profiles"] == worker["profiles"] == ["ray"]
    build = head["build"]
    dockerfile = (repo_root / build["context"] / build["dockerfile"]).read_text(encoding="utf-8")
    base = re.search(r"FROM rayproject/ray:(\d+\.\d+\.\d+)-py311", dockerfile)
    assert base is not None and base.group(1) == importlib.metadata.version("ray")
    assert "'.[ray]'" in dockerfile
    assert head["image"] == worker["image"] == f"composer-ray:{base.group(1)}"
    assert published(head) == {8265} and "ports" not in worker
    assert "--head" in head["command"] and "--address=ray-head:6379" in worker["command"]
    assert worker["depends_on"]["ray-head"]["condition"] == "service_healthy"
    assert head["volumes"] == worker["volumes"] == ["./:/work"]


def test_named_volumes_hold_every_state(compose: dict[str, Any]) -> None:
    declared = set(compose["volumes"])
    assert declared == {"postgres-data", "mlflow-artifacts", "qdrant-storage"}
    mounts = {
        "postgres": "/var/lib/postgresql/data", "mlflow": "/mlartifacts", "qdrant": "/qdrant/storage",
    }
    for name, target in mounts.items():
        volumes = [v.split(":") for v in compose["services"][name]["volumes"]]
        assert any(src in declared and dst == target for src, dst, *_ in volumes), name


def test_every_variable_is_documented_without_real_secrets(repo_root: Path) -> None:
    text = (repo_root / "docker-compose.yml").read_text(encoding="utf-8")
    used = set(VARIABLE.findall(text))
    example = {}
    for line in (repo_root / ".env.example").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            example[key] = value
    assert used == set(example), "document each compose variable in .env.example"
    # Required ones (${VAR:?...}) have no default in the compose file: placeholders in the example.
    required = set(re.findall(r"\$\{(\w+):\?", text))
    assert required == {"POSTGRES_PASSWORD", "QDRANT_API_KEY"}
    assert all(example[k].startswith("change-me") for k in required)
    assert ".env" in (repo_root / ".gitignore").read_text(encoding="utf-8").splitlines()


def test_the_team_experiment_points_at_the_compose_services(compose: dict[str, Any], repo_root: Path) -> None:
    exp = load_experiment(repo_root / "experiments" / "team.yaml")
    services = compose["services"]
    storage = urlsplit(exp.storage_url)
    assert storage.scheme == "postgresql+psycopg2" and storage.password is None  # PGPASSWORD, not the file
    assert storage.port in published(services["postgres"]) and storage.path == "/optuna"
    assert storage.username == "composer"  # POSTGRES_USER's default
    tracking = urlsplit(exp.tracking_uri)
    assert tracking.scheme == "http" and tracking.port in published(services["mlflow"])
    assert exp.qdrant is not None
    qdrant = urlsplit(exp.qdrant)
    assert qdrant.scheme == "http" and qdrant.port == 6333
    for path in (exp.corpus, exp.questions, exp.search_space):
        assert path.is_file()
