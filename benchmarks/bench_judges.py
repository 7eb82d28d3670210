"""1,000 LLM-judge calls against the local fake server: concurrency efficiency, then a rerun from the cache.

The server runs in its own process (a real provider does not share our interpreter) and answers every
request after a fixed latency. With concurrency C the ideal wall time is calls / C x latency; the target
is at most 1.25x that. The rerun uses a fresh client on the same cache directory, as a resumed study
would, and must reach the server zero times.

    .venv/bin/python benchmarks/bench_judges.py [--calls 1000] [--concurrency 32] [--latency 0.2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.queues import Queue
from pathlib import Path
from typing import TYPE_CHECKING

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

if TYPE_CHECKING:
    from fake_llm_server import Route

    from composer.data.types import Question
    from composer.judges import RatingJudge, Verdict

TARGET_RATIO = 1.25


def _serve(route: Callable[[], Route], latency: float, ready: Queue[str]) -> None:
    from fake_llm_server import FakeLLMServer

    server = FakeLLMServer(route(), latency=latency)
    server.start()
    ready.put(server.url)
    while True:
        time.sleep(3600)


@contextmanager
def fake_server(route: Callable[[], Route], latency: float) -> Iterator[str]:
    """The tests' fake OpenAI-compatible server in a process of its own (a real provider does not share our
    interpreter), replying with ``route()`` after ``latency`` seconds: its URL. ``route`` builds the reply
    function in that process, so it must be picklable (a module-level function, or a partial of one)."""
    ctx = multiprocessing.get_context("spawn")
    ready: Queue[str] = ctx.Queue()
    proc = ctx.Process(target=_serve, args=(route, latency, ready), daemon=True)
    proc.start()
    try:
        yield ready.get(timeout=60)
    finally:
        proc.terminate()
        proc.join()


def server_stats(url: str) -> dict[str, int]:
    """The fake server's counters: chat requests, most requests in flight."""
    with urllib.request.urlopen(url + "/stats", timeout=10) as response:
        stats: dict[str, int] = json.loads(response.read())
        return stats


def _rating_route() -> Route:
    return lambda req: '{"rating": 4, "reason": "correct, one detail missing"}'


async def _judge_all(judge: RatingJudge, questions: list[Question], answers: list[str]) -> list[Verdict]:
    return list(
        await asyncio.gather(*(judge.ajudge(q, a, []) for q, a in zip(questions, answers, strict=True)))
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.2)
    args = parser.parse_args()

    with fake_server(_rating_route, args.latency) as url:
        from composer.data.types import Question
        from composer.judges import RatingJudge
        from composer.llm import LLMClient, LLMConfig, TokenPrice, run_sync

        config = LLMConfig(
            model="openai/bench-judge",
            api_base=url,
            max_concurrency=args.concurrency,
            timeout=30,
            price=TokenPrice(input=0.15, output=0.6),
        )
        questions = [
            Question(f"q{i}", f"What is fact number {i}?", reference_answer=f"Fact {i}.")
            for i in range(args.calls)
        ]
        answers = [f"It is fact {i}." for i in range(args.calls)]
        with tempfile.TemporaryDirectory() as cache_dir:
            client = LLMClient(config, cache_dir=cache_dir)
            warm = run_sync(
                RatingJudge(client).ajudge(Question("w", "Warm-up?", reference_answer="x"), "y", [])
            )
            assert warm.score.score is not None, warm.score.reason
            before = server_stats(url)["chat_requests"]

            started, cpu_started = time.perf_counter(), time.process_time()
            verdicts = run_sync(_judge_all(RatingJudge(client), questions, answers))
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
            stats = server_stats(url)
            judged = stats["chat_requests"] - before
            ideal = args.calls / args.concurrency * args.latency
            ok = sum(v.score.score == 0.75 for v in verdicts)

            rerun_client = LLMClient(config, cache_dir=cache_dir)
            started = time.perf_counter()
            rerun = run_sync(_judge_all(RatingJudge(rerun_client), questions, answers))
            rerun_wall = time.perf_counter() - started
            rerun_requests = server_stats(url)["chat_requests"] - before - judged

    ratio = wall / ideal
    latency_ms = args.latency * 1000
    print(f"judge calls:        {args.calls} (concurrency {args.concurrency}, latency {latency_ms:.0f} ms)")
    print(f"server requests:    {judged}, max in flight {stats['max_in_flight']}, parsed {ok}/{args.calls}")
    print(
        f"wall time:          {wall:.2f} s; ideal {ideal:.2f} s; ratio {ratio:.2f} (target <= {TARGET_RATIO})"
    )
    print(
        f"client CPU:         {cpu:.2f} s ({cpu / args.calls * 1000:.1f} ms per call, mostly litellm); "
        f"the event loop was busy {cpu / wall:.0%} of the wall time"
    )
    print(
        f"tokens / cost:      {client.usage.total_tokens} tokens, ${client.usage.cost:.4f} "
        f"(custom price 0.15 / 0.60 USD per 1M)"
    )
    print(
        f"rerun from cache:   {rerun_wall:.2f} s, {rerun_requests} server requests, "
        f"{rerun_client.usage.cached}/{args.calls} cached, ${rerun_client.usage.cost:.4f}"
    )
    same = [v.score for v in verdicts] == [v.score for v in rerun]
    print(f"rerun verdicts identical: {same}")
    passed = ratio <= TARGET_RATIO and rerun_requests == 0 and same and ok == args.calls
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
