"""Per-question parity of our retrieval metrics with trec_eval (pytrec_eval) and ranx on ARCD, to 1e-9.

Runs are generated here: a small numpy BM25 over stemmed tokens (top 20; it ties wherever ARCD repeats a
paragraph), the same candidates with random scores, and the BM25 ranking with tie-free rank scores. Each is
scored as documents, as pseudo chunks ``doc#i`` collapsed to documents, and as chunks.

Ties: trec_eval re-sorts a run by score, then by document id descending; ``trec_order`` does the same, so
trec_eval is checked on every run. ranx orders equal scores by numba's unstable quicksort, neither by id nor
by insertion order (40 tied documents come out shuffled), so ranx is checked on the tie-free runs only.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from composer.data.types import Hit, Question, QuestionSet
from composer.evaluation import evaluate_ranking
from composer.metrics.matching import MatchMode
from composer.metrics.retrieval import RETRIEVAL_METRICS, metric_key
from composer.metrics.textmatch import contains_answer
from composer.text import tokenize

ARCD = Path(__file__).resolve().parents[2] / "examples" / "arcd"
KS = (1, 3, 5, 10)
TOP = 20
CHUNK_WORDS = 25
TOLERANCE = 1e-9

Run = dict[str, list[Hit]]
Scores = dict[str, dict[str, float]]  # question id -> metric key -> value


class TinyBm25:
    """Okapi BM25 over Composer's normalized, stemmed Arabic tokens; identical texts score identically."""

    def __init__(self, texts: list[str], k1: float = 1.2, b: float = 0.75) -> None:
        docs = [Counter(tokenize(t, "ar", stem=True)) for t in texts]
        lengths = np.array([sum(d.values()) for d in docs], dtype=np.float64)
        postings: dict[str, tuple[list[int], list[int]]] = {}
        for i, counts in enumerate(docs):
            for term, tf in counts.items():
                postings.setdefault(term, ([], []))[0].append(i)
                postings[term][1].append(tf)
        n = len(texts)
        self.k1 = k1
        self.size = n
        self.norm = k1 * (1 - b + b * lengths / lengths.mean())
        self.postings = {
            term: (
                np.array(idx),
                np.array(tfs, dtype=np.float64),
                math.log(1 + (n - len(idx) + 0.5) / (len(idx) + 0.5)),
            )
            for term, (idx, tfs) in postings.items()
        }

    def scores(self, query: str) -> np.ndarray:
        out = np.zeros(self.size)
        for term in dict.fromkeys(tokenize(query, "ar", stem=True)):
            if term in self.postings:
                idx, tf, idf = self.postings[term]
                out[idx] += idf * tf * (self.k1 + 1) / (tf + self.norm[idx])
        return out


def _read(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@cache
def arcd() -> tuple[dict[str, str], list[Question]]:
    docs = {str(r["id"]): str(r["text"]) for r in _read(ARCD / "corpus.jsonl")}
    questions = [
        Question(
            str(r["id"]),
            str(r["question"]),
            tuple(r["relevant_ids"]),  # type: ignore[arg-type]
            reference_answer=str(r["reference_answer"]),
        )
        for r in _read(ARCD / "questions.jsonl")
    ]
    return docs, questions


@cache
def chunks() -> dict[str, str]:
    """Pseudo chunks of CHUNK_WORDS words, ids ``doc#i``."""
    docs, _ = arcd()
    out = {}
    for doc_id, text in docs.items():
        words = text.split()
        for i in range(0, len(words), CHUNK_WORDS):
            out[f"{doc_id}#{i // CHUNK_WORDS}"] = " ".join(words[i : i + CHUNK_WORDS])
    return out


@cache
def chunk_questions() -> list[Question]:
    """ARCD questions labelled with their document's chunks holding the answer (else all its chunks)."""
    _, questions = arcd()
    by_doc: dict[str, list[str]] = {}
    for chunk_id in chunks():
        by_doc.setdefault(chunk_id.split("#")[0], []).append(chunk_id)
    labelled = []
    for q in questions:
        own = [c for d in q.relevant_ids for c in by_doc[d]]
        answer = q.reference_answer or ""
        bearing = [c for c in own if contains_answer(chunks()[c], answer)]
        labelled.append(Question(q.id, q.question, tuple(bearing or own)))
    return labelled


@cache
def bm25_run(level: str) -> Run:
    docs, questions = arcd()
    collection = docs if level == "doc" else chunks()
    ids = list(collection)
    bm25 = TinyBm25(list(collection.values()))
    run: Run = {}
    for q in questions:
        scores = bm25.scores(q.question)
        if not scores.any():
            continue
        floor = max(np.sort(scores)[-TOP], np.nextafter(0, 1))  # the 20th score, ties at the cut included
        candidates = [Hit(ids[i], float(scores[i])) for i in np.flatnonzero(scores >= floor)]
        run[q.id] = sorted(candidates, key=lambda h: (h.score, h.id), reverse=True)[:TOP]  # trec order
    return run


@cache
def random_run(level: str) -> Run:
    rng = np.random.default_rng(2024)
    return {qid: [Hit(h.id, float(rng.random())) for h in hits] for qid, hits in bm25_run(level).items()}


@cache
def rank_scored_run(level: str) -> Run:
    return {
        qid: [Hit(h.id, float(TOP - r)) for r, h in enumerate(hits)] for qid, hits in bm25_run(level).items()
    }


RUNS: dict[str, Callable[[str], Run]] = {
    "bm25": bm25_run,
    "random": random_run,
    "bm25-rank-scored": rank_scored_run,
}
# (run level, match mode): documents, chunks collapsed to documents, chunks.
SETTINGS: list[tuple[str, MatchMode]] = [("doc", "document"), ("chunk", "document"), ("chunk", "chunk")]


def _questions(mode: MatchMode) -> list[Question]:
    return chunk_questions() if mode == "chunk" else arcd()[1]


def ours(run: Run, level: str, mode: MatchMode) -> Scores:
    """Per-question scores through ``evaluate_ranking``: the path every run and trial is scored by."""
    questions = QuestionSet([q for q in _questions(mode) if q.id in run])
    report = evaluate_ranking(questions, run, ks=KS, match=mode)
    wanted = {metric_key(name, k) for name in RETRIEVAL_METRICS for k in KS}
    out: Scores = {}
    for sample in report.samples:
        scores = {m: sample.metrics[m] for m in wanted}
        out[sample.question_id] = {m: float(v) for m, v in scores.items() if v is not None}
        assert len(out[sample.question_id]) == len(wanted)
    return out


def oracle_inputs(
    run: Run, level: str, mode: MatchMode
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, float]]]:
    """Qrels and run as the oracles take them; chunks become documents at their best score."""
    qrels, oracle_run = {}, {}
    for q in _questions(mode):
        if q.id not in run:
            continue
        qrels[q.id] = {label: 1 for label in q.relevant_ids}
        scores: dict[str, float] = {}
        for hit in run[q.id]:
            key = hit.id.split("#")[0] if mode == "document" else hit.id
            scores[key] = max(scores.get(key, -math.inf), hit.score)
        oracle_run[q.id] = scores
    return qrels, oracle_run


def trec_eval(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> Scores:
    import pytrec_eval

    cutoffs = ",".join(map(str, KS))
    measures = {f"{m}.{cutoffs}" for m in ("success", "recall", "P", "ndcg_cut")}
    results = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    names = {"hit_rate": "success", "recall": "recall", "precision": "P", "ndcg": "ndcg_cut"}
    out: Scores = {
        qid: {metric_key(ours_name, k): r[f"{theirs}_{k}"] for ours_name, theirs in names.items() for k in KS}
        for qid, r in results.items()
    }
    for k in KS:  # trec_eval's recip_rank has no cutoff: score the run cut at k
        cut = {
            qid: dict(sorted(docs.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:k])
            for qid, docs in run.items()
        }
        for qid, r in pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut).items():
            out[qid][metric_key("mrr", k)] = r["recip_rank"]
    return out


def ranx_eval(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> Scores:
    from ranx import Qrels, evaluate
    from ranx import Run as RanxRun

    metrics = [metric_key(name, k) for name in RETRIEVAL_METRICS for k in KS]
    ranx_run = RanxRun(run)
    evaluate(Qrels(qrels), ranx_run, metrics, return_mean=False)
    return {qid: {m: float(ranx_run.scores[m][qid]) for m in metrics} for qid in run}


def assert_parity(mine: Scores, theirs: Scores) -> None:
    assert mine.keys() == theirs.keys()
    diffs = [
        (qid, m, value, theirs[qid][m])
        for qid, values in mine.items()
        for m, value in values.items()
        if abs(value - theirs[qid][m]) > TOLERANCE
    ]
    assert not diffs, f"{len(diffs)} per-question differences, e.g. {diffs[:5]}"


def test_the_generated_runs_cover_arcd_and_tie() -> None:
    _, questions = arcd()
    for level in ("doc", "chunk"):
        run = bm25_run(level)
        assert len(run) >= 0.99 * len(questions)
        assert max(len(hits) for hits in run.values()) == TOP
        assert sum(len(hits) < 10 for hits in run.values()) > 10  # k beyond the end of the list
        tied = sum(len({h.score for h in hits[:10]}) < len(hits[:10]) for hits in run.values())
        assert tied >= 40, f"{level}: only {tied} questions tie in the top 10"
        random_scores = [h.score for hits in random_run(level).values() for h in hits]
        assert len(set(random_scores)) == len(random_scores)
    assert sum(len(q.relevant_ids) > 1 for q in chunk_questions()) > 100  # chunk mode has several targets


@pytest.mark.parametrize("level,mode", SETTINGS, ids=[f"{lv}-run-{m}-mode" for lv, m in SETTINGS])
@pytest.mark.parametrize("run_name", list(RUNS))
def test_trec_eval_parity(run_name: str, level: str, mode: MatchMode) -> None:
    run = RUNS[run_name](level)
    mine = ours(run, level, mode)
    assert_parity(mine, trec_eval(*oracle_inputs(run, level, mode)))
    assert any(v[metric_key("hit_rate", 10)] for v in mine.values())
    assert any(not v[metric_key("hit_rate", 1)] for v in mine.values())


# slow: in a fresh environment ranx compiles its numba metrics on first use (~90 s on 2 cores; cached in
# its __pycache__ after that); the trec_eval parity above checks every run and mode in a second.
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:unsafe cast")
@pytest.mark.parametrize("level,mode", SETTINGS, ids=[f"{lv}-run-{m}-mode" for lv, m in SETTINGS])
@pytest.mark.parametrize("run_name", ["random", "bm25-rank-scored"])
def test_ranx_parity_on_tie_free_runs(run_name: str, level: str, mode: MatchMode) -> None:
    run = RUNS[run_name](level)
    assert_parity(ours(run, level, mode), ranx_eval(*oracle_inputs(run, level, mode)))
