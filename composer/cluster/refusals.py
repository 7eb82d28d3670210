"""What a study on a Ray cluster must share, checked before anything starts.

Workers on other machines reach only what every machine reaches: a SQLite file or a local MLflow store is
one machine's, so a cluster (``auto`` or ``ray://``) needs the study's storage and MLflow on servers.
``local`` runs every worker on this machine and needs neither.
"""

from __future__ import annotations

import logging
from typing import Any

from composer.errors import ConfigError, InputError
from composer.rdb_store import is_postgres_url
from composer.study.experiment import ExperimentConfig, RayConfig

logger = logging.getLogger(__name__)

INSTALL = "pip install 'composer-rag[ray]'"


def ray_config(exp: ExperimentConfig) -> RayConfig | None:
    """The experiment's Ray executor, None when its trials run in this process."""
    return None if exp.executor is None else exp.executor.ray


def is_cluster(address: str) -> bool:
    """Whether workers may run on other machines (anything but ``local``)."""
    return address != "local"


def checked(exp: ExperimentConfig, config: RayConfig) -> ExperimentConfig:
    """``exp`` as the workers get it, or a ConfigError naming what to set: on a cluster the storage and
    MLflow must be servers; the caches default to the study's PostgreSQL database (``shared_caches``),
    and Qdrant Edge, one machine's, is built again on each machine (a warning)."""
    from composer.store import sqlite_file
    from composer.tracking.setup import is_local_store

    if exp.strategy == "staged":
        raise ConfigError("strategy: staged runs in one process: remove executor: ray (or --ray), or use "
                          "strategy: joint", field="executor.ray")
    if not is_cluster(config.address):
        return exp
    where = f"workers on a Ray cluster ({config.address})"
    if exp.storage_url.startswith("sqlite") or sqlite_file(exp.storage_url) is not None:
        raise ConfigError(f"{where} cannot share a SQLite study: set storage: postgresql://USER@HOST/DB "
                          "(or --storage), or --ray local", field="storage")
    if is_local_store(exp.tracking_uri):
        raise ConfigError(f"{where} cannot share a local MLflow store: set mlflow: {{tracking_uri: "
                          "http://HOST:5000}, or --ray local", field="mlflow.tracking_uri")
    exp = shared_caches(exp, config)
    if exp.qdrant is None:
        logger.warning("%s with Qdrant Edge: each machine builds its own copy of every index; set qdrant: "
                       "http://HOST:6333 to build each index once for the cluster", where)
    return exp


def shared_caches(exp: ExperimentConfig, config: RayConfig | None) -> ExperimentConfig:
    """``exp`` with the caches its workers share: on a cluster, ``caches:`` unset is the study's
    PostgreSQL database (every machine reaches it); the caches live only in PostgreSQL, so a study on
    another database must set ``caches:``. The study and ``--estimate`` read the same caches this way."""
    if config is None or not is_cluster(config.address) or exp.caches is not None:
        return exp
    if not is_postgres_url(exp.storage_url):
        raise ConfigError(f"workers on a Ray cluster ({config.address}) share their caches in PostgreSQL, "
                          "and the study's storage is not: set caches: postgresql://USER@HOST/DB",
                          field="caches")
    return exp.model_copy(update={"caches": exp.storage_url})


def ray_module() -> Any:
    """Ray, imported here only: without the ``ray`` extra an InputError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise InputError(f"Ray is not installed: {INSTALL}", field="executor.ray") from None
    return ray
