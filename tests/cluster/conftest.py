"""A local two-node Ray cluster (``ray.cluster_utils.Cluster``: a head and a second node, one CPU each),
PostgreSQL (``tests/postgres.py``) and an MLflow tracking server on it, each started once per module: what
a study on a Ray cluster needs, on this machine. The test process never joins the cluster: the drivers
under test are ``composer optimize`` subprocesses."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from postgres import Postgres, postgres_bin, running_postgres


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    bin_dir = postgres_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries not installed (/usr/lib/postgresql/*/bin): "
                    "apt-get install postgresql, as .ci/run does")
    # Each worker holds its study's, its caches' (composer.rdb_store) and its MLflow writer's connections,
    # beside the MLflow server's pool: more than one machine's few workers need.
    with running_postgres(bin_dir, max_connections=200) as pg:
        yield pg


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """Two Ray nodes on this machine, one CPU each; yields the head's address (``--ray ADDRESS``)."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        yield cluster.address
    finally:
        cluster.shutdown()


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory, postgres: Postgres) -> Iterator[str]:
    """An MLflow tracking server on loopback over PostgreSQL, as docker-compose.yml runs it."""
    from postgres import running_mlflow_server

    with running_mlflow_server(tmp_path_factory.mktemp("mlflow"), postgres.database("mlflow")) as url:
        yield url


