"""A conversational evaluation with each history rewrite: turns per second, requests per turn, recall@5.

The bundled ARCD conversations (examples/arcd-conversations: 51 conversations, 146 turns of which 95 are
follow-ups written by hand) are scored by BM25 with ``conversation.rewrite`` none, concat (window 2, the
follow-up's weight 0.7) and llm. The llm rewrite goes to a scripted OpenAI-compatible server on 127.0.0.1
that answers each condense request with the follow-up's gold standalone question after ``--latency``
seconds (a stand-in for a provider: the requests, their caching and their cost to the turn are real, the
rewrites are the gold ones). Each rewrite is run twice from one work dir: the first pass pays the
requests, the second reads what the first left in the work dir (the rewrite cache, the BM25 candidates:
what every later trial of a study with the same retrieval settings does). The same is done on
the full ARCD corpus (460 paragraphs, bundled) to show how the cost per turn grows with the corpus.

Then the study: experiments/arcd-conversations.yaml (rewrite none or concat, window, assistant turns, the
follow-up's weight; BM25; held-out 30%) is run from an empty work dir, and its winner is scored against
``rewrite: none`` on the follow-ups: the mean difference of recall@5 with its 95% paired bootstrap interval
over conversations (whole conversations resampled), on the held-out follow-ups and on all of them. With
``--persianqa DIR`` the same study runs on a Persian set built by rule from PersianQA
(benchmarks/build_persian_conversations.py; GPL-3.0, read from its path, never shipped).

    .venv/bin/python benchmarks/bench_conversations.py [--latency 0.05] [--persianqa DIR]
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
_FOLLOW_UP = re.compile(
    r"(?:سؤال المتابعة|پرسش پیگیری|Follow-up question):\s*⟦data⟧\s*(.+?)\s*⟦/data⟧\s*$", re.S
)


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
    conversation: dict[str, Any] = {"rewrite": mode}
    if mode == "llm":
        conversation["model"] = "openai/scripted"
    config = {"retrieval": {"mode": "bm25", "k": 5}, "conversation": conversation}
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


def verdict(name: str, questions: Path, corpus: Path, workdir: Path) -> None:
    """The study's winner against ``rewrite: none`` on the follow-ups, paired over conversations."""
    import numpy as np

    import composer
    from composer.data import load_corpus, load_questions
    from composer.evaluation.scoring import score_pipeline
    from composer.evaluation.splits import SplitConfig, split_questions
    from composer.metrics.stats import paired_bootstrap_ci
    from composer.pipeline.pipeline import Pipeline
    from composer.study.experiment import load_experiment

    exp = load_experiment(ROOT / "experiments" / "arcd-conversations.yaml")
    began = time.perf_counter()
    result = composer.optimize(exp.model_copy(update={"questions": questions, "corpus": corpus,
                                                      "workdir": workdir}))
    seconds = time.perf_counter() - began
    assert result.best_config is not None, "the study completed no trial"
    winner = {key: value for key, value in result.best_config.items() if key in ("retrieval", "conversation")}
    qs, docs = load_questions(questions), load_corpus(corpus)
    _, held = split_questions(qs, SplitConfig(held_out=0.3, seed=0))
    recall: dict[str, dict[str, float]] = {}
    for label, config in (("winner", winner), ("none", {**winner, "conversation": {"rewrite": "none"}})):
        pipe = Pipeline.from_config(config, workdir=workdir)
        pipe.index(docs)
        report = score_pipeline(pipe, qs, docs, ks=(5,), answers=False, batch_size=len(qs)).report
        recall[label] = dict(zip(report.table.question_ids, report.table.metrics["recall@5"].tolist(),
                                 strict=True))
    print(f"\n{name}: {len(qs)} turns, {sum(q.is_follow_up for q in qs)} follow-ups; the study "
          f"({len(result.study.trials)} trials, repeats included, {seconds:.1f} s) chose "
          f"{winner['conversation']}")
    print("| follow-ups | n (conversations) | winner recall@5 | none recall@5 | difference | 95% CI over "
          "conversations |")
    print("|---|---|---|---|---|---|")
    for part, pool in (("held out", held), ("all", qs)):
        follow = [q for q in (pool or []) if q.is_follow_up]
        a = np.array([recall["winner"][q.id] for q in follow])
        b = np.array([recall["none"][q.id] for q in follow])
        low, high = paired_bootstrap_ci(a, b, groups=[q.conversation for q in follow])
        print(f"| {part} | {len(follow)} ({len({q.conversation for q in follow})}) | {a.mean():.3f} "
              f"| {b.mean():.3f} | {a.mean() - b.mean():+.3f} | [{low:+.3f}, {high:+.3f}] |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per scripted rewrite")
    parser.add_argument("--persianqa", type=Path, help="PersianQA's folder: also the Persian study")
    args = parser.parse_args()
    from fake_llm_server import FakeLLMServer

    gold = rewrites()
    print(f"{QUESTIONS.relative_to(ROOT)}: {len(gold)} follow-ups with a gold rewrite; "
          f"scripted rewrite latency {args.latency * 1000:.0f} ms\n")
    print("| corpus | rewrite | recall@5 | follow-ups' recall@5 | turns/s, first pass | turns/s, second pass "
          "| LLM requests per turn (first, second) |")
    print("|---|---|---|---|---|---|---|")
    with FakeLLMServer(route(gold, args.latency)) as server:
        with tempfile.TemporaryDirectory() as tmp:  # litellm's first import and connection, untimed
            one("llm", CORPORA["ARCD sample (60 paragraphs)"], Path(tmp), server.url)
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
    with tempfile.TemporaryDirectory() as tmp:
        verdict("Arabic, examples/arcd-conversations", QUESTIONS, CORPORA["ARCD sample (60 paragraphs)"],
                Path(tmp))
    if args.persianqa is not None:
        import subprocess

        with tempfile.TemporaryDirectory() as tmp:
            built = Path(tmp) / "persian-conversations.jsonl"
            subprocess.run([sys.executable, str(ROOT / "benchmarks" / "build_persian_conversations.py"),
                            "--persianqa", str(args.persianqa), "--out", str(built)], check=True)
            corpus = args.persianqa / "corpus.jsonl"
            verdict("Persian, built from PersianQA", built, corpus, Path(tmp) / "work")


if __name__ == "__main__":
    main()
