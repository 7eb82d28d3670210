"""Pure functions run over shards of a large input in worker processes, one shard per core.

Analyzing a corpus for BM25 (language detection, normalization, regex tokenizing, dict lookups) is
Python-level work that one core does at ~5,000 chunks a second; a 2-core machine halves it. The workers
are fresh interpreters (``python -m composer.index.parallel``), each fed one pickled call on stdin and
answering on stdout. Not multiprocessing's ``fork``: a study's process runs Qdrant's, torch's and the
MLflow writer's threads, and a forked child can inherit a lock one of them held. Not ``spawn`` either:
it re-runs the top level of the user's script in every child, so a script that calls
``composer.optimize`` without an ``if __name__ == "__main__"`` guard would start its study again.
"""

from __future__ import annotations

import itertools
import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar, cast

from composer.errors import ComposerError
from composer.pickling import dump_strings, load_strings

R = TypeVar("R")
_LOST = object()

PARALLEL_MIN = 20_000
"""Items from which ``map_shards`` uses worker processes: starting one costs ~0.3 s, what one core
analyzes of ~1,500 chunks, and each shard's input and result are pickled through a pipe."""


def cores() -> int:
    """The cores this process may run on (its CPU affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


SHARDS_PER_CORE = 4
"""A large input is cut finer than one shard per core, so progress moves as shards finish."""


def shards(n: int) -> list[slice]:
    """``n`` items cut into ``SHARDS_PER_CORE`` contiguous slices per core (one slice below
    ``PARALLEL_MIN`` items, or on one core)."""
    parts = min(cores() * SHARDS_PER_CORE, n) if n >= PARALLEL_MIN and cores() > 1 else 1
    bounds = [n * i // parts for i in range(parts + 1)]
    return [slice(lo, hi) for lo, hi in itertools.pairwise(bounds)]


def map_shards(
    func: Callable[..., R], calls: Sequence[tuple[Any, ...]], done: Callable[[int], None] | None = None
) -> list[R]:
    """``[func(*args) for args in calls]``: here for a single call, else each call in a worker process of
    its own, one per core at a time. ``func`` must be a module-level function (it is pickled by name);
    ``done(i)`` is told as call ``i`` finishes."""
    if len(calls) == 1:
        results = [func(*calls[0])]
        if done is not None:
            done(0)
        return results

    def one(i: int) -> R:
        result = _in_worker(func, calls[i])
        if done is not None:
            done(i)
        return result

    with ThreadPoolExecutor(min(cores(), len(calls))) as pool:  # each thread waits on its worker's pipe
        return list(pool.map(one, range(len(calls))))


def _in_worker(func: Callable[..., R], args: tuple[Any, ...]) -> R:
    """One call in a fresh worker; the call and its result are streamed through the pipes, never held
    whole as bytes on either side (a shard of 100k texts pickles to ~100 MB).

    An argument that is a list of strings (the texts to analyze) follows the call through
    ``pickling.dump_strings``: pickled as they are, they would stay in this process twice."""
    package_root = str(Path(__file__).resolve().parents[2])  # the worker imports this very composer
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": package_root + (os.pathsep + path if path else "")}
    with tempfile.TemporaryFile() as errors, subprocess.Popen(
        [sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors,
        env=env,
    ) as worker:
        assert worker.stdin is not None and worker.stdout is not None
        result: Any = _LOST
        try:
            with worker.stdin:  # the worker reads the whole call before it writes anything
                texts = [i for i, arg in enumerate(args) if _is_texts(arg)]
                head = tuple(_TEXTS if i in texts else arg for i, arg in enumerate(args))
                pickle.dump((func, head), worker.stdin, protocol=5)
                for i in texts:
                    dump_strings(args[i], worker.stdin)
            result = pickle.load(worker.stdout)
        except (OSError, EOFError, pickle.UnpicklingError):
            pass  # the worker died: its exit status and last words say more
        if worker.wait() != 0 or result is _LOST:
            errors.seek(0)
            lines = errors.read().decode("utf-8", "replace").strip().splitlines()
            raise ComposerError(f"a worker process running {func.__qualname__} failed: "
                                f"{lines[-1] if lines else f'exit status {worker.returncode}'}")
    return cast(R, result)


_TEXTS = "composer.index.parallel:texts"
"""Stands in the pickled call for a list of strings that follows it in blocks."""


def _is_texts(arg: Any) -> bool:
    return isinstance(arg, list) and bool(arg) and all(type(x) is str for x in arg)


def _serve() -> None:
    stdin = sys.stdin.buffer
    func, head = pickle.load(stdin)
    args: list[Any] = []
    for arg in head:
        args.append(load_strings(stdin) if isinstance(arg, str) and arg == _TEXTS else arg)
    pickle.dump(func(*args), sys.stdout.buffer, protocol=5)


if __name__ == "__main__":
    _serve()
