"""The encoding pass inside a study on Ray: the driver's encoding actors encode the distinct texts for
both workers (the leaderboard of one process), take only what the workers leave free (workers that
hold the only GPU still finish), and a worker that no node can place is refused, not waited for."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
from postgres import Postgres
from sample_study import write_experiment

from composer.cluster.driver import _check_placeable, _start_encoders, optimize_on_ray
from composer.embedding import EmbeddingCache, actors
from composer.embedding.actors import EncoderPlan
from composer.errors import ConfigError
from composer.study.experiment import RayConfig, load_experiment
from composer.study.space import SearchSpace

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # Ray, and workers that import torch

DIMS = {"retrieval.mode": {"choices": ["dense"]}, "retrieval.k": {"choices": [3, 5]}}


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Space defaults that encode with the tiny test model (seconds to load, on any machine)."""
    from tiny_models import ARABIC_PIECES, save_tiny_sentence_transformer

    model = save_tiny_sentence_transformer(tmp_path_factory.mktemp("tiny"), ARABIC_PIECES)
    return {"embedding": {"provider": "sentence-transformers", "model": str(model)}}


def board(storage: str, name: str) -> dict[tuple[tuple[str, Any], ...], float | None]:
    study = optuna.load_study(study_name=name, storage=storage)
    return {tuple(sorted(t.params.items())): t.value for t in study.get_trials(deepcopy=False)
            if t.state == optuna.trial.TrialState.COMPLETE}


def test_a_worker_no_node_can_place_is_refused() -> None:
    class Nodes:
        @staticmethod
        def nodes() -> list[dict[str, Any]]:
            return [{"Alive": True, "Resources": {"CPU": 2.0, "GPU": 1.0}},
                    {"Alive": False, "Resources": {"CPU": 8.0}}]

    with pytest.raises(ConfigError, match=r"no node of the Ray cluster can run a worker"):
        _check_placeable(Nodes(), {"CPU": 4.0})
    _check_placeable(Nodes(), {"CPU": 2.0, "GPU": 0.5})


def test_actors_follow_what_the_space_retrieves_and_where_it_encodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(actors, "start_encoders", lambda study, plan: plan)

    class Cluster:
        @staticmethod
        def cluster_resources() -> dict[str, float]:
            return {"CPU": 8.0, "GPU": 2.0}

    def plan(defaults: dict[str, Any]) -> EncoderPlan | None:
        return _start_encoders(Cluster(), "s", RayConfig(), SearchSpace((), defaults))

    assert plan({"retrieval": {"mode": "bm25"}, "embedding": {"batch_size": 8}}) is None  # BM25 only
    assert plan({}) == EncoderPlan(2, 3.0, 0.0)  # no embedding key: hybrid with the default model
    # GPU actors because the embedding runs on cuda (the workers ask no GPU), on what the workers leave
    assert plan({"embedding": {"device": "cuda"}}) == EncoderPlan(2, 1.0, 1.0)


@pytest.mark.timeout(300)
def test_workers_holding_the_only_gpu_finish_a_dense_study(tmp_path: Path, dense: dict[str, Any]) -> None:
    """The issue's example on a one-GPU machine (a GPU Ray counts, none torch sees): no actor holds what
    the workers need, so the study does not wait forever."""
    path = write_experiment(tmp_path, dims=DIMS, defaults=dense, name="gpu", sampler={"name": "grid"},
                            executor={"ray": {"address": "local", "workers": 2,
                                              "resources": {"CPU": 1, "GPU": 0.5}}})
    before = signal.getsignal(signal.SIGTERM)  # ray.init's own, never taken back: not for the next tests
    ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    try:
        optimize_on_ray(load_experiment(path))
    finally:
        ray.shutdown()
        signal.signal(signal.SIGTERM, before)
    assert len(board(f"sqlite:///{tmp_path / '.composer' / 'optuna.db'}", "gpu")) == 2


def test_two_workers_share_the_actors_of_a_dense_study(
    tmp_path: Path, postgres: Postgres, ray_cluster: str, mlflow_server: str, dense: dict[str, Any]
) -> None:
    storage = postgres.database("dense")
    on_ray = write_experiment(tmp_path, dims=DIMS, defaults=dense, name="dense", sampler={"name": "grid"},
                              storage=storage, mlflow={"traces": 0, "tracking_uri": mlflow_server},
                              executor={"ray": {"workers": 2, "resources": {"CPU": 0.5},  # two 1-CPU nodes
                                                "encoders": {"actors": 2, "resources": {"CPU": 0.5}}}})
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run([sys.executable, "-m", "composer", "optimize", str(on_ray), "--ray", ray_cluster],
                          cwd=tmp_path, capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    line = next(line for line in done.stderr.splitlines() if "encoding actors encoded" in line)
    per_actor = [int(n) for n in line.split("encoded ")[1].split(" texts")[0].split(" + ")]

    (tmp_path / "one").mkdir()
    one = write_experiment(tmp_path / "one", dims=DIMS, defaults=dense, name="one", sampler={"name": "grid"})
    assert subprocess.run([sys.executable, "-m", "composer", "optimize", str(one)], cwd=tmp_path / "one",
                          capture_output=True, timeout=240, env=env).returncode == 0
    distinct = len(EmbeddingCache(tmp_path / "one" / ".composer" / "cache" / "embeddings"))
    assert len(per_actor) == 2 and all(n > 0 for n in per_actor)  # both actors worked
    # Each distinct chunk and question is encoded on the actors, for both workers; two workers that miss
    # the same texts at the same instant (both building the first index) may each send them: twice at most.
    assert distinct <= sum(per_actor) <= 2 * distinct
    alone = f"sqlite:///{tmp_path / 'one' / '.composer' / 'optuna.db'}"
    assert board(storage, "dense") == board(alone, "one")
