"""BM25 analyzers and index options on ARCD and PersianQA, at document level, through the real pipeline.

    .venv/bin/python benchmarks/bench_analyzers.py --arcd examples/arcd --persianqa PATH/TO/persianqa

Every row is a ``Pipeline`` (BM25 only, top 10, whole documents as chunks unless ``--chunk-size`` says
otherwise) scored by ``evaluate_pipeline``: the numbers a study's trial sees. "index s" is
``Pipeline.index`` from an empty Qdrant Edge collection with every analysis memo cleared first, so it
includes tokenizing the corpus (and loading a stemmer on its first use). "Δ nDCG@10" is each row's
paired difference to the plain baseline (the issue's recipe: NFKC, no diacritics, Arabic letter forms
folded, lower case, Snowball Arabic, no stopwords), with a 95% paired bootstrap interval over questions.
Prints Markdown tables (docs/benchmarks.md, "BM25 analyzers and index options", keeps the last run's).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import numpy as np

from composer.data import Corpus, QuestionSet, load_corpus, load_questions
from composer.evaluation import evaluate_pipeline
from composer.metrics.stats import bootstrap_ci
from composer.pipeline.pipeline import Pipeline
from composer.text import analyzers, lang

# The module, not the function composer.text re-exports under the same name.
tokenize = importlib.import_module("composer.text.tokenize")

BASELINE = "plain (issue baseline)"
ROWS: list[tuple[str, dict[str, Any]]] = [
    (BASELINE, {"analyzer": "plain", "stopwords": False}),
    ("plain + stopwords", {"analyzer": "plain"}),
    ("default", {}),
    ("default, no stopwords", {"stopwords": False}),
    ("default, no stemming", {"stem": False}),
    ("isri", {"analyzer": "isri"}),
    ("tashaphyne", {"analyzer": "tashaphyne"}),
    ("rishe", {"analyzer": "rishe"}),
    ("rishe, no stopwords", {"analyzer": "rishe", "stopwords": False}),
    ("default, title 1", {"title_weight": 1.0}),
    ("default, title 3", {"title_weight": 3.0}),
    ("isri, title 3", {"analyzer": "isri", "title_weight": 3.0}),
    ("tashaphyne, title 3", {"analyzer": "tashaphyne", "title_weight": 3.0}),
    ("rishe, title 3", {"analyzer": "rishe", "title_weight": 3.0}),
    ("default, k1 0.9 b 0.9", {"k1": 0.9, "b": 0.9}),
    ("default, k1 2.0 b 0.5", {"k1": 2.0, "b": 0.5}),
    ("default, title 3, k1 0.9 b 0.9", {"title_weight": 3.0, "k1": 0.9, "b": 0.9}),
]
METRICS = ("hit_rate@1", "hit_rate@5", "ndcg@10")


def clear_memos() -> None:
    """Forget every analysis, so each row's index time includes tokenizing the corpus."""
    lang.detect_language.cache_clear()
    tokenize._analyze.cache_clear()
    analyzers._analyze.cache_clear()


def bench(name: str, corpus: Corpus, questions: QuestionSet, workdir: Path, chunk_size: int) -> None:
    print(f"\n#### {name}: {len(corpus)} documents, {len(questions)} questions\n")
    print("| analyzer / options | hit@1 | hit@5 | nDCG@10 | Δ nDCG@10 vs baseline [95% CI] | index s |")
    print("|---|---|---|---|---|---|")
    baseline: np.ndarray | None = None
    for label, options in ROWS:
        config = {
            "chunking": {"method": "paragraph", "size": chunk_size},
            "retrieval": {"mode": "bm25", "k": 10, **options},
        }
        pipeline = Pipeline.from_config(config, workdir=workdir)
        clear_memos()
        report = evaluate_pipeline(pipeline, corpus, questions, ks=(1, 5, 10))
        means = report.means()
        ndcg = report.values("ndcg@10")
        if baseline is None:
            baseline = ndcg
            delta = "—"
        else:
            low, high = bootstrap_ci(ndcg - baseline, resamples=2000)
            delta = f"{float(np.mean(ndcg - baseline)):+.3f} [{low:+.3f}, {high:+.3f}]"
        seconds = report.meta["index"]["seconds"]
        cells = " | ".join(f"{means[m]:.3f}" for m in METRICS)
        print(f"| {label} | {cells} | {delta} | {seconds:.2f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--arcd", type=Path, help="folder with ARCD's corpus.jsonl and questions.jsonl")
    parser.add_argument("--persianqa", type=Path, help="folder with PersianQA's corpus and questions")
    parser.add_argument("--chunk-size", type=int, default=4000,
                        help="paragraph chunk size; 4000 keeps every ARCD and PersianQA document whole")
    parser.add_argument("--workdir", type=Path, help="work dir (default: a new temporary one)")
    args = parser.parse_args()
    if args.arcd is None and args.persianqa is None:
        parser.error("give --arcd and/or --persianqa")
    print(f"### Last run: {dt.date.today().isoformat()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}; BM25 only, top 10, document level, Qdrant Edge")
    with tempfile.TemporaryDirectory(prefix="bench-analyzers-") as tmp:
        workdir = args.workdir or Path(tmp)
        for name, folder in (("ARCD", args.arcd), ("PersianQA", args.persianqa)):
            if folder is not None:
                corpus = load_corpus(folder / "corpus.jsonl")
                questions = load_questions(folder / "questions.jsonl", corpus=corpus)
                bench(name, corpus, questions, workdir, args.chunk_size)


if __name__ == "__main__":
    main()
