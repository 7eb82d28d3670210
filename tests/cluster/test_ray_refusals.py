"""What a study on Ray refuses, before anything starts (exit 2, one line naming what to set), what it
defaults, and a worker that cannot read the experiment's files: no Ray cluster is started here."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from sample_study import write_experiment
from typer.testing import CliRunner

from composer.cli.app import app
from composer.cluster.refusals import INSTALL, checked
from composer.cluster.worker import work
from composer.errors import InputError
from composer.study.experiment import RayConfig, load_experiment

PG = "postgresql+psycopg2://composer@db.example:5432/studies"


def refused(tmp_path: Path, *args: str, **fields: object) -> str:
    """``composer optimize`` with ``args``: exit 2, one error line (returned), nothing written."""
    exp = write_experiment(tmp_path, **fields)
    result = CliRunner().invoke(app, ["optimize", str(exp), *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert not (tmp_path / ".composer").exists()  # refused before the study, its stores or Ray started
    return lines[0]


def test_a_remote_cluster_with_a_sqlite_study_is_refused(tmp_path: Path) -> None:
    line = refused(tmp_path, "--ray", "auto", "--workers", "2")
    assert "storage: postgresql://" in line and "SQLite" in line
    assert "ray" not in sys.modules or not __import__("ray").is_initialized()


def test_a_remote_cluster_with_a_local_mlflow_store_is_refused(tmp_path: Path) -> None:
    line = refused(tmp_path, "--ray", "ray://head:10001", storage=PG)
    assert "mlflow: {tracking_uri: http://" in line


def test_workers_without_an_address_are_refused(tmp_path: Path) -> None:
    assert "--ray ADDRESS" in refused(tmp_path, "--workers", "3")


def test_a_staged_study_on_ray_is_refused(tmp_path: Path) -> None:
    assert "strategy: staged" in refused(tmp_path, "--ray", "local", strategy="staged")


def test_without_ray_installed_the_line_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails as without the extra
    assert INSTALL in refused(tmp_path, "--ray", "local")


def test_on_a_cluster_the_caches_default_to_the_study_database(tmp_path: Path) -> None:
    exp = load_experiment(write_experiment(tmp_path, storage=PG, mlflow={"tracking_uri": "http://mlflow:5000"},
                                           qdrant="http://qdrant:6333"))
    assert checked(exp, RayConfig(address="auto")).caches == PG
    assert checked(exp, RayConfig(address="local")).caches is None  # one machine: the SQLite caches
    mine = exp.model_copy(update={"caches": "postgresql://composer@cache-db/caches"})
    assert checked(mine, RayConfig(address="auto")).caches == "postgresql://composer@cache-db/caches"


def test_on_a_cluster_a_study_database_other_than_postgresql_needs_caches_set(tmp_path: Path) -> None:
    mysql = "mysql+pymysql://composer@db.example/studies"
    line = refused(tmp_path, "--ray", "auto", storage=mysql, mlflow={"tracking_uri": "http://mlflow:5000"},
                   qdrant="http://qdrant:6333")
    assert "set caches: postgresql://" in line and "is not a postgresql:// URL" not in line


@pytest.mark.parametrize(("resources", "said"),
                         [({"CPU": -1}, "negative"), ({"CPU": 1, "memory": 2e9}, "memory")])
def test_worker_resources_ray_refuses_are_refused_before_the_study(
    tmp_path: Path, resources: dict[str, float], said: str
) -> None:
    line = refused(tmp_path, executor={"ray": {"address": "local", "resources": resources}})
    assert "executor.ray.resources" in line and said in line


def test_on_a_cluster_qdrant_edge_warns_that_each_machine_builds_its_copy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    exp = load_experiment(write_experiment(tmp_path, storage=PG, mlflow={"tracking_uri": "http://mlflow:5000"}))
    checked(exp, RayConfig(address="auto"))
    assert "each machine builds its own copy" in caplog.text
    caplog.clear()
    checked(exp.model_copy(update={"qdrant": "http://qdrant:6333"}), RayConfig(address="auto"))
    assert "each machine" not in caplog.text


def test_a_worker_that_cannot_read_the_corpus_names_its_machine_and_the_path(tmp_path: Path) -> None:
    exp = load_experiment(write_experiment(tmp_path))
    missing = tmp_path / "elsewhere" / "corpus.jsonl"
    error = work(exp.model_copy(update={"corpus": missing}), 2, "study")
    assert isinstance(error, InputError)
    line = str(error)
    assert "\n" not in line and socket.gethostname() in line and str(missing) in line


def test_composer_optimize_honours_the_executor(tmp_path: Path) -> None:
    import composer
    from composer.errors import ConfigError

    exp = write_experiment(tmp_path)
    with pytest.raises(ConfigError, match="storage: postgresql://"):
        composer.optimize(exp, executor={"ray": {"address": "auto"}})
    with pytest.raises(ConfigError, match="name the factory"):
        composer.optimize(lambda settings: lambda question: [], space={"k": [1, 2]},
                          questions=tmp_path / "questions.jsonl", corpus=tmp_path / "corpus.jsonl",
                          executor={"ray": {"address": "local"}}, workdir=tmp_path / "factory")
    assert not (tmp_path / ".composer").exists()
    assert not [p for p in (tmp_path / "factory").glob("*.db")]  # no study, no MLflow store
