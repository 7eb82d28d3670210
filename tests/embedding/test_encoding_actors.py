"""The encoding pass on Ray actors: each missing chunk encoded once, on the actors, into the
content-addressed cache, with the one-process vectors; workers attach to the driver's actors by name."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from composer.embedding import CachedEmbedder, EmbeddingCache, make_embedder
from composer.embedding.actors import (
    CPU_BATCH,
    GPU_BATCH,
    EncoderPlan,
    EncoderPool,
    PooledEmbedder,
    attach_encoders,
    attached_encoders,
    detach_encoders,
    plan_encoders,
    start_encoders,
    stop_encoders,
)
from composer.embedding.config import EmbeddingConfig
from composer.errors import ConfigError
from composer.pipeline import workspace

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # a Ray instance and actors that import torch: tens of seconds here

WORDS = ["مرحبا", "بالعالم", "جمال", "خاشقجي", "ولد", "المدينة", "سلام", "دنیا", "کتاب", "مدرسه"]


def texts(n: int) -> list[str]:
    """``n`` distinct Arabic and Persian texts of a few words."""
    return [" ".join(WORDS[(i * k) % len(WORDS)] for k in range(1, 2 + i % 5)) + f" {i}" for i in range(n)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    """One local Ray instance for the module (starting one costs seconds). ``ray.init`` sets a SIGTERM
    handler it never takes back: the one before is put back, for the next tests in this process."""
    before = signal.getsignal(signal.SIGTERM)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never another's
    yield
    ray.shutdown()
    signal.signal(signal.SIGTERM, before)


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> EmbeddingConfig:
    from tiny_models import ARABIC_PIECES, save_tiny_sentence_transformer

    model = save_tiny_sentence_transformer(tmp_path_factory.mktemp("tiny"), ARABIC_PIECES)
    return EmbeddingConfig(provider="sentence-transformers", model=str(model))


@pytest.fixture(scope="module")
def pool(cluster: None) -> Iterator[EncoderPool]:
    """The module's study's two actors (an actor's start, which imports Composer and torch, costs
    seconds): each test reads the actors' counters as differences."""
    started = start_encoders("actors-test", EncoderPlan(actors=2, cpus=1.0, gpus=0.0), batch=16)
    yield started
    stop_encoders(started)


@pytest.fixture(autouse=True)
def detached(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(workspace, "_EMBEDDERS", {})
    yield
    detach_encoders()


def counts(pool: EncoderPool) -> list[int]:
    return list(ray.get([actor.encoded.remote() for actor in pool.actors]))


def test_two_actors_encode_each_missing_chunk_once_with_the_one_process_vectors(
    pool: EncoderPool, config: EmbeddingConfig, tmp_path: Path
) -> None:
    chunks = texts(150)
    asked = chunks + chunks[:40]  # repeats: encoded once all the same
    alone = make_embedder(config).encode_passages(chunks)
    attach_encoders("actors-test")
    before = counts(pool)
    embedder = workspace.shared_embedder(config)
    assert isinstance(embedder, PooledEmbedder)
    cache = EmbeddingCache(tmp_path)
    vectors = CachedEmbedder(embedder, cache).encode_passages(asked)
    assert np.allclose(vectors[: len(chunks)], alone, atol=1e-6, rtol=0)
    assert np.array_equal(vectors[len(chunks) :], vectors[:40])
    assert len(cache) == len(chunks)  # one row per distinct chunk
    per_actor = [n - b for n, b in zip(counts(pool), before, strict=True)]
    assert sum(per_actor) == len(chunks) and all(n > 0 for n in per_actor)  # both actors worked
    # Cached now: a second pass (another trial, another worker) sends nothing to the actors.
    again = CachedEmbedder(workspace.shared_embedder(config), cache)
    assert np.array_equal(again.encode_passages(asked), vectors)
    assert again.computed == 0 and sum(counts(pool)) - sum(before) == len(chunks)
    assert embedder.dim == alone.shape[1]


def test_a_worker_attaches_to_the_drivers_actors_by_study_name(
    pool: EncoderPool, config: EmbeddingConfig
) -> None:
    detach_encoders()  # as a worker process starts: nothing attached, it encodes itself
    assert not isinstance(workspace.shared_embedder(config), PooledEmbedder)
    assert attach_encoders("another-study") is None and attached_encoders() is None
    found = attach_encoders("actors-test")
    assert found is not None and len(found.actors) == 2 and attached_encoders() is found
    before = found.encoded()
    queries = texts(5)
    assert np.allclose(workspace.shared_embedder(config).encode_queries(queries),
                       make_embedder(config).encode_queries(queries), atol=1e-6, rtol=0)
    assert found.encoded() - before == 5
    detach_encoders()
    assert attached_encoders() is None


def test_cuda_without_gpus_gets_cpu_actors(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="composer.embedding"):
        plan = plan_encoders({"CPU": 4.0}, workers=1, worker={"CPU": 1.0}, device="cuda")
    assert "no GPU" in caplog.text and plan == EncoderPlan(actors=1, cpus=3.0, gpus=0.0)
    assert plan.batch == CPU_BATCH


def test_actors_get_only_what_the_workers_leave_free() -> None:
    gpu_workers = {"CPU": 1.0, "GPU": 0.5}
    # The example on one GPU: the workers hold it; they encode themselves, nothing waits forever.
    assert plan_encoders({"CPU": 2.0, "GPU": 1.0}, workers=2, worker=gpu_workers, device="cuda") is None
    assert plan_encoders({"CPU": 2.0, "GPU": 1.0}, workers=2, worker=gpu_workers, device="cpu") is None
    cuda = plan_encoders({"CPU": 4.0, "GPU": 2.0}, workers=2, worker=gpu_workers, device="cuda")
    assert cuda == EncoderPlan(actors=2, cpus=1.0, gpus=0.5) and cuda.batch == GPU_BATCH
    # CPU actors reserve whole CPUs, as many as are free, and encode with that many threads.
    one = {"CPU": 1.0}
    assert plan_encoders({"CPU": 8.0}, workers=2, worker=one, device="cpu") == EncoderPlan(2, 3.0, 0.0)
    assert plan_encoders({"CPU": 3.0}, workers=2, worker=one, device="cpu") == EncoderPlan(1, 1.0, 0.0)
    assert plan_encoders({"CPU": 8.0}, workers=2, worker=one, device="cpu", actors=0) is None
    asked = plan_encoders({"CPU": 2.0}, workers=2, worker={"CPU": 0.5}, device="cpu", actors=2,
                          resources={"CPU": 0.5})
    assert asked == EncoderPlan(2, 0.5, 0.0)
    with pytest.raises(ConfigError, match=r"executor\.ray\.encoders"):
        plan_encoders({"CPU": 2.0}, workers=2, worker={"CPU": 1.0}, device="cpu", actors=2,
                      resources={"CPU": 1.0})


def test_an_attached_worker_pieces_texts_as_the_actors_were_started(pool: EncoderPool) -> None:
    found = attach_encoders("actors-test")
    assert found is not None and found.batch == pool.batch == 16


def test_a_block_of_misses_is_spread_over_both_actors(
    cluster: None, config: EmbeddingConfig, tmp_path: Path
) -> None:
    """Pieces as large as the cached embedder's blocks (a GPU actor's 512): both actors still work."""
    wide = start_encoders("wide-pieces", EncoderPlan(actors=2, cpus=0.0, gpus=0.0), batch=256)
    try:
        before = counts(wide)
        chunks = texts(300)
        cached = CachedEmbedder(workspace.shared_embedder(config), EmbeddingCache(tmp_path))
        vectors = cached.encode_passages(chunks)
        per_actor = [n - b for n, b in zip(counts(wide), before, strict=True)]
        assert sum(per_actor) == 300 and all(n > 0 for n in per_actor)
        assert np.allclose(vectors, make_embedder(config).encode_passages(chunks), atol=1e-6, rtol=0)
    finally:
        stop_encoders(wide)


def _pid(actor: Any) -> int | None:
    """The process an actor runs in now (None while Ray restarts it)."""
    try:
        return int(ray.get(actor.__ray_call__.remote(lambda self: os.getpid()), timeout=30))
    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
        return None


def test_a_killed_actor_is_restarted_and_encodes_the_same(pool: EncoderPool, config: EmbeddingConfig) -> None:
    queries = texts(40)
    first = pool.encode(config, queries, "query")
    killed = _pid(pool.actors[0])
    ray.kill(pool.actors[0], no_restart=False)  # as a lost node or a crashed process
    assert np.array_equal(pool.encode(config, queries, "query"), first)
    # Ray kills when it gets to it: the actor's restart (its counter from 0) must not land in the next test
    deadline = time.monotonic() + 60
    while (now := _pid(pool.actors[0])) is None or now == killed:
        assert time.monotonic() < deadline, "the killed actor was never restarted"
        time.sleep(0.1)


def _in_a_worker(study: str, config: str, queries: list[str]) -> tuple[bool, np.ndarray]:
    """What a study's worker does in its own Ray process: attach, then encode through the workspace."""
    from composer.embedding.actors import PooledEmbedder, attach_encoders
    from composer.pipeline.workspace import shared_embedder

    attach_encoders(study)
    embedder = shared_embedder(EmbeddingConfig.model_validate_json(config))
    return isinstance(embedder, PooledEmbedder), embedder.encode_queries(queries)


def test_a_worker_process_encodes_on_the_drivers_actors(pool: EncoderPool, config: EmbeddingConfig) -> None:
    before = pool.encoded()
    queries = texts(7)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # a worker cannot import a test module
    task = ray.remote(num_cpus=0)(_in_a_worker)  # the two actors hold the instance's 2 CPUs
    pooled, vectors = ray.get(task.remote("actors-test", config.model_dump_json(), queries))
    assert pooled and pool.encoded() - before == 7
    assert np.allclose(vectors, make_embedder(config).encode_queries(queries), atol=1e-6, rtol=0)
