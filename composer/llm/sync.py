"""Running async LLM code from synchronous callers, on one long-lived event loop.

One loop for the whole process, in a daemon thread: litellm's HTTP sessions stay bound to a live loop
(a fresh ``asyncio.run`` per batch orphans them), and the facade also works where a loop is already running
(Jupyter, an async caller). The caller's context variables (usage trackers) travel with the coroutine.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import queue
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="composer-llm-loop", daemon=True).start()
            _loop = loop
        return _loop


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on the background loop and return its result (or raise its error)."""
    loop = _background_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        coro.close()
        raise RuntimeError("run_sync called from the LLM loop itself; await the coroutine instead")
    result: concurrent.futures.Future[T] = concurrent.futures.Future()
    tasks: list[asyncio.Task[T]] = []

    def start() -> None:
        task = loop.create_task(coro)  # copies the current context: the caller's, see call_soon_threadsafe
        tasks.append(task)
        task.add_done_callback(lambda t: _settle(t, result))

    loop.call_soon_threadsafe(start, context=contextvars.copy_context())
    try:
        return result.result()
    except BaseException:
        if tasks and not tasks[0].done():
            loop.call_soon_threadsafe(tasks[0].cancel)  # Ctrl-C: stop the calls we no longer wait for
        raise


def iterate_sync(items: AsyncIterator[T]) -> Iterator[T]:
    """``items`` consumed on the background loop in one task (its context variables hold across items),
    each handed to the synchronous caller as it comes; a caller that stops early cancels the task."""
    handoff: queue.Queue[tuple[str, Any]] = queue.Queue()

    async def pump() -> None:
        try:
            async for item in items:
                handoff.put(("item", item))
        except BaseException as exc:
            handoff.put(("error", exc))
            raise
        handoff.put(("end", None))

    loop = _background_loop()
    tasks: list[asyncio.Task[None]] = []
    loop.call_soon_threadsafe(lambda: tasks.append(loop.create_task(pump())),
                              context=contextvars.copy_context())
    try:
        while True:
            kind, value = handoff.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        loop.call_soon_threadsafe(lambda: [t.cancel() for t in tasks])


def _settle(task: asyncio.Task[T], result: concurrent.futures.Future[T]) -> None:
    if task.cancelled():
        result.cancel()
    elif (exc := task.exception()) is not None:
        result.set_exception(exc)
    else:
        result.set_result(task.result())


async def gather_until_failed(
    coroutines: Sequence[Coroutine[Any, Any, T]], failed: Callable[[T], bool], allowed: int | None
) -> tuple[list[T], int]:
    """Run ``coroutines`` concurrently: (results in completion order, how many ``failed``).

    As soon as more than ``allowed`` results failed (None: no limit) the calls still pending are
    cancelled, so a run that is over its failure budget stops paying for requests at once.
    """
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    done: list[T] = []
    n_failed = 0
    try:
        for next_done in asyncio.as_completed(tasks):
            result = await next_done
            done.append(result)
            n_failed += failed(result)
            if allowed is not None and n_failed > allowed:
                break
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return done, n_failed
