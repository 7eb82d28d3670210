"""A conversational evaluation with each history rewrite: turns per second, requests per turn, recall@5.

The bundled ARCD conversations (examples/arcd-conversations: 51 conversations, 146 turns of which 95 are
follow-ups written by hand) are scored by BM25 with ``conversation.rewrite`` none, concat (window 2, the
follow-up's weight 0.7) and llm. The llm rewrite goes to a scripted OpenAI-compatible server on 127.0.0.1
that answers each condense request with the follow-up's gold standalone question after ``--latency``
seconds (a stand-in for a provider: the requests, their caching and their cost to the turn are real, the
rewrites are the gold ones). Each rewrite is run twice from one work dir: the first pass pays the
requests, the second reads the rewrite cache (what every later trial of a study does). The same is done on
the full ARCD corpus (460 paragraphs, bundled) to show how the cost per turn grows with the corpus.

    .venv/bin/python benchmarks/bench_conversations.py [--latency 0.05]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

QUESTIONS = ROOT / "examples" / "arcd-conversations" / "questions.jsonl"
CORPORA = {"ARCD sample (60 paragraphs)": ROOT / "examples" / "arcd-sample" / "corpus.jsonl",
           "ARCD (460 paragraphs)": ROOT / "examples" / "arcd" / "corpus.jsonl"}
MODES = ("none", "concat", "llm")
_FOLLOW_UP = re.compile(r"(?:سؤال المتابعة|پرسش پیگیری|Follow-up question):\s*(.+)\s*$", re.S)


def rewrites() -> dict[str, str]:
    """Each follow-up's text -> its gold standalone question, as the scripted server answers."""
    from composer.data import load_questions

    return {q.question: q.standalone for q in load_questions(QUESTIONS) if q.standalone}


def route(gold: dict[str, str], latency: float) -> Any:
    from fake_llm_server import ChatRequest

    def reply(req: ChatRequest) -> str:
        time.sleep(latency)
        found = _FOLLOW_UP.search(req.prompt)
        follow_up = found.group(1).strip() if found else req.prompt
        return json.dumps({"question": gold.get(follow_up, follow_up)}, ensure_ascii=False)

    return reply


def one(mode: str, corpus: Path, workdir: Path, url: str) -> dict[str, Any]:
    """Two passes of the one scoring path (``score_pipeline``, retrieval only: no answers, so each rewrite
    does the same work but its own) on one work dir: seconds, recall@5 of all turns and of the follow-ups,
    and the LLM requests each pass sent."""
    from composer.data import load_corpus, load_questions
    from composer.evaluation.scoring import score_pipeline
    from composer.llm import LLMConfig
    from composer.pipeline.pipeline import Pipeline

    questions = load_questions(QUESTIONS)
    docs = load_corpus(corpus)
    follow_ups = [q.id for q in questions if q.is_follow_up]
    config = {"retrieval": {"mode": "bm25", "k": 5}, "conversation": {"rewrite": mode}}
    llm = LLMConfig(model="openai/scripted", api_base=url) if mode == "llm" else None
    passes = []
    for _ in range(2):
        pipe = Pipeline.from_config(config, workdir=workdir, llm=llm)  # a fresh process's pipeline
        pipe.index(docs)
        began = time.perf_counter()
        scored = score_pipeline(pipe, questions, docs, ks=(5,), answers=False, batch_size=len(questions))
        seconds = time.perf_counter() - began
        recall = scored.report.table.metrics["recall@5"]
        ids = list(scored.report.table.question_ids)
        follow = [float(recall[ids.index(i)]) for i in follow_ups]
        passes.append({"seconds": seconds, "recall": float(recall.mean()),
                       "follow_up_recall": sum(follow) / len(follow), "requests": scored.usage.requests})
    return {"turns": len(questions), "follow_ups": len(follow_ups), "passes": passes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per scripted rewrite")
    args = parser.parse_args()
    from fake_llm_server import FakeLLMServer

    gold = rewrites()
    print(f"{QUESTIONS.relative_to(ROOT)}: {len(gold)} follow-ups with a gold rewrite; "
          f"scripted rewrite latency {args.latency * 1000:.0f} ms\n")
    print("| corpus | rewrite | recall@5 | follow-ups' recall@5 | turns/s, first pass | turns/s, cached "
          "| LLM requests per turn (first, cached) |")
    print("|---|---|---|---|---|---|---|")
    with FakeLLMServer(route(gold, args.latency)) as server:
        for name, corpus in CORPORA.items():
            for mode in MODES:
                with tempfile.TemporaryDirectory() as tmp:
                    server.reset_counts()
                    row = one(mode, corpus, Path(tmp), server.url)
                first, cached = row["passes"]
                turns = row["turns"]
                print(f"| {name} | {mode} | {first['recall']:.3f} | {first['follow_up_recall']:.3f} "
                      f"| {turns / first['seconds']:.0f} | {turns / cached['seconds']:.0f} "
                      f"| {first['requests'] / turns:.2f}, {cached['requests'] / turns:.2f} |")


if __name__ == "__main__":
    main()
