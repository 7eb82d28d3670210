"""Tune your own system: a factory ``settings -> system`` and a space over the factory's own settings.

Composer runs an Optuna study over it (pruning, MLflow, the held-out re-score), exactly as for its own
pipelines. Run from the repository root: ``python examples/tune_factory.py`` (run it again: it resumes).
"""

from __future__ import annotations

from own_retriever import CORPUS, QUESTIONS, MyRetriever

import composer
from composer.data import load_corpus

if __name__ == "__main__":
    corpus = load_corpus(CORPUS)
    result = composer.optimize(
        lambda s: MyRetriever(k=s["k"], k1=s["k1"], corpus=corpus),
        space={"k": [3, 5, 10], "k1": {"low": 0.6, "high": 2.0, "step": 0.2}},
        questions=QUESTIONS, corpus=corpus,
        objective={"metrics": {"ndcg": 1, "recall": 1}, "k": 10},
        n_trials=8, split={"held_out": 0.3}, name="my-bm25",
    )
    print(result.best_value, result.best_params)  # e.g. 0.849 {'k': 10, 'k1': 1.6}
    print(result.study)  # the optuna.Study; every trial is a nested MLflow run
    if result.held_out is not None and result.held_out.difference is not None:
        print(result.held_out.difference)  # winner minus runner-up on the 56 held-out questions
        print(result.held_out.difference.verdict)  # the words `composer optimize` prints
