"""What a winner costs in LLM calls, dollars and time: the joint search against ``strategy: staged``, in one
run, on the same data, space, sampler, seed and trial budget.

A scripted server in its own process stands in for a paid provider: it charges per token (the experiment's
``llm: prices``, USD per million tokens, two generators and a cheap judge) and answers after a per-token
latency (prompt tokens and reply tokens, as words). Its answers depend on retrieval and generation alike: the
gold answer only when the passages sent hold it (else the refusal), whole from the dear model and halved
from the cheap one, bare with the concise template and padded with the grounded one. The objective weighs
recall@5, nDCG@5 and token F1 (the judge runs, and is paid, but is not weighed: its scripted verdicts say
nothing). Each strategy starts from an empty work dir (no index, no LLM cache).

Printed per strategy: trials run, LLM calls (what reached the server), dollars (the trials' own
accounting), wall seconds, the best composite, and the trials, calls, dollars and seconds it took to reach a
winner within 0.01 composite of the joint search's best (a staged study's stage-1 trials count, with their
zero calls).

    .venv/bin/python benchmarks/bench_llm_cost.py [--trials 20] [--questions 30] [--seeds 0]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

SAMPLE = ROOT / "examples" / "arcd-sample"
PRICES = {  # USD per million tokens
    "openai/cheap": {"input": 0.15, "output": 0.6},
    "openai/dear": {"input": 2.5, "output": 10.0},
}
PROMPT_S, REPLY_S = 0.00005, 0.004
"""Seconds per prompt token and per reply token."""
NEAR = 0.01
SPACE = {
    "defaults": {"retrieval": {"mode": "bm25"}},
    "dimensions": {
        "retrieval.k": {"choices": [1, 2, 3, 5]},
        "retrieval.analyzer": {"choices": ["default", "isri"]},
        "retrieval.title_weight": {"choices": [0.0, 3.0]},
        "generation.model": {"choices": ["openai/cheap", "openai/dear"]},
        "generation.template": {"choices": ["concise", "grounded"]},
    },
}


class PricedRAG:
    """The route: answers as the module docstring says, judges as ``ScriptedRAG``, after a latency per
    token."""

    def __init__(self, golds: dict[str, str]) -> None:
        from scripted_llm import ScriptedRAG

        self.scripted = ScriptedRAG(golds)

    def __call__(self, req: Any) -> Any:
        from fake_llm_server import Reply
        from scripted_llm import kind_of

        reply = self.answer(req) if kind_of(req) == "generate" else self.scripted(req)
        content = reply if isinstance(reply, str) else reply.content
        prompt = sum(len(str(m.get("content", "")).split()) for m in req.messages)
        return Reply(content=content, delay=prompt * PROMPT_S + len(content.split()) * REPLY_S)

    def answer(self, req: Any) -> str:
        from scripted_llm import template_of

        from composer.generation.prompts import REFUSALS
        from composer.llm.prompt import prompt_language

        question = self.scripted.question_of(req) or ""
        gold = self.scripted.golds.get(question)
        if gold is None or gold not in req.prompt.replace(question, ""):
            return REFUSALS[prompt_language(req.prompt)]
        words = gold.split()
        said = gold if "dear" in req.model else " ".join(words[: (len(words) + 1) // 2])
        return said if template_of(req) == "concise" else f"{said} بحسب السياق"


def _serve(golds: dict[str, str], ready: Queue[str]) -> None:
    from fake_llm_server import FakeLLMServer

    server = FakeLLMServer(PricedRAG(golds))
    server.start()
    ready.put(server.url)
    while True:
        time.sleep(3600)


@contextmanager
def scripted_server(golds: dict[str, str]) -> Iterator[str]:
    """The server in its own process (a provider does not share our interpreter); its URL."""
    ctx = multiprocessing.get_context("fork")
    ready: Queue[str] = ctx.Queue()
    process = ctx.Process(target=_serve, args=(golds, ready), daemon=True)
    process.start()
    try:
        yield ready.get(timeout=60)
    finally:
        process.terminate()
        process.join()


def chat_requests(url: str) -> int:
    with urllib.request.urlopen(f"{url}/stats", timeout=10) as reply:
        return int(json.loads(reply.read())["chat_requests"])


@dataclass
class Step:
    """One trial that ran (repeats, answered from an earlier trial, left out), in the order it ran: its LLM
    spend, its composite (None: a stage-1 trial or a failure) and when it ended, in seconds since the run
    began."""

    requests: int
    cost: float
    composite: float | None
    ended_s: float


def steps(storage: str, names: list[str], began: datetime) -> list[Step]:
    import optuna

    from composer.record import TrialRecord
    from composer.study.fate import fate_of

    out: list[Step] = []
    for name in names:
        for t in optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False):
            if fate_of(t) == "repeat":
                continue
            record = TrialRecord.of(t)
            usage = record.llm_usage if record is not None else {}
            full = name == names[-1] and fate_of(t) == "complete" and record is not None
            ended = (t.datetime_complete - began).total_seconds() if t.datetime_complete else 0.0
            out.append(Step(int(usage.get("llm_requests", 0)), float(usage.get("llm_cost_usd", 0.0)),
                            record.composite if full and record is not None else None, ended))
    return out


def warm_up() -> None:
    """Load what the first study of a process loads once (litellm, MLflow, Optuna, Qdrant), so that the
    first strategy's wall time does not carry it."""
    import mlflow  # noqa: F401
    import optuna  # noqa: F401
    import qdrant_edge  # noqa: F401

    from composer.llm.sdk import load_litellm

    load_litellm()


def run(strategy: str, root: Path, url: str, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    import yaml

    import composer
    from composer.study.experiment import load_experiment

    root.mkdir()
    lines = (SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()[: args.questions]
    (root / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "space.yaml").write_text(yaml.safe_dump(SPACE, allow_unicode=True), encoding="utf-8")
    experiment: dict[str, Any] = {
        "name": "bench", "corpus": str(SAMPLE / "corpus.jsonl"), "questions": "questions.jsonl",
        "search_space": "space.yaml",
        "objective": {"k": 5, "metrics": {"recall": 1, "ndcg": 1, "token_f1": 2}},
        "sampler": {"name": "tpe", "seed": seed}, "pruner": "none", "n_trials": args.trials,
        "batch_size": args.questions, "mlflow": {"traces": 0}, "workdir": "work", "strategy": strategy,
        "llm": {"model": "openai/cheap", "api_base": url, "prices": PRICES},
        "judge": {"metrics": ["answer_correctness"]},
    }
    if strategy == "staged":
        experiment["stages"] = {"retrieval_trials": args.trials // 2, "top_n": args.top_n}
    path = root / "experiment.yaml"
    path.write_text(yaml.safe_dump(experiment, allow_unicode=True), encoding="utf-8")
    before, began, started = chat_requests(url), datetime.now(), time.monotonic()
    result = composer.optimize(path)
    wall = time.monotonic() - started
    names = ["bench.retrieval", "bench"] if strategy == "staged" else ["bench"]
    trials = steps(load_experiment(path).storage_url, names, began)
    return {"strategy": strategy, "steps": trials, "calls": chat_requests(url) - before, "wall": wall,
            "best": result.best_value, "cost": sum(s.cost for s in trials)}


def reached(row: dict[str, Any], target: float) -> tuple[int, int, float, float] | None:
    """Trials, LLM calls, dollars and seconds until the first trial at ``target`` or above."""
    calls, cost = 0, 0.0
    for i, step in enumerate(row["steps"], 1):
        calls, cost = calls + step.requests, cost + step.cost
        if step.composite is not None and step.composite >= target:
            return i, calls, cost, step.ended_s
    return None


def table(rows: list[dict[str, Any]], seed: int) -> None:
    target = rows[0]["best"] - NEAR
    print(f"\nseed {seed}: target = joint's best {rows[0]['best']:.4f} - {NEAR}")
    print("| strategy | trials | LLM calls | $ | wall s | best composite | to reach: trials | calls | $ "
          "| s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        got = reached(row, target)
        tail = "not reached | | |" if got is None else f"{got[0]} | {got[1]} | {got[2]:.4f} | {got[3]:.0f}"
        print(f"| {row['strategy']} | {len(row['steps'])} | {row['calls']} | {row['cost']:.4f} | "
              f"{row['wall']:.0f} | {row['best']:.4f} | {tail} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20, help="n_trials of each strategy")
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--top-n", type=int, default=2)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()

    from composer.data import load_questions

    questions = load_questions(SAMPLE / "questions.jsonl")
    golds = {q.question: q.gold_answers[0] for q in questions if q.gold_answers}
    warm_up()
    with scripted_server(golds) as url, tempfile.TemporaryDirectory(prefix="composer-bench-cost-") as tmp:
        for seed in args.seeds:
            rows = [run(s, Path(tmp) / f"{s}-{seed}", url, args, seed) for s in ("joint", "staged")]
            table(rows, seed)


if __name__ == "__main__":
    main()
