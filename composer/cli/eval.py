"""`composer eval`: score a retrieval run against a question set."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from composer.cli.options import QDRANT, WORKDIR, qdrant_api_key
from composer.errors import InputError
from composer.metrics.matching import MatchMode


def eval_command(
    questions: Path = typer.Argument(
        ..., help="Question set: JSONL, JSON, CSV, XLSX or Parquet with id, question, relevant_ids..."
    ),
    run: Path | None = typer.Option(
        None,
        "--run",
        help='Retrieval run to score: JSONL {"id": question id, "results": [{"id", "score", "text"?}]} '
        "or a TREC run file.",
    ),
    config: Path | None = typer.Option(
        None, "--config", help="Pipeline YAML to run end to end instead of scoring a --run (needs --corpus)."
    ),
    k: list[int] = typer.Option([1, 3, 5, 10], "--k", help="Cutoffs, e.g. --k 1 3 5 10."),
    match: MatchMode | None = typer.Option(
        None,
        "--match",
        help="What counts as relevant (default: chosen from the labels): document ids, chunk ids, chunks "
        "containing a gold answer, or text matching the gold context.",
    ),
    corpus: Path | None = typer.Option(
        None,
        "--corpus",
        help="Corpus (JSONL/JSON/CSV/Parquet or a folder of .txt/.md): checks relevant ids and gives "
        "the texts that answer and context matching read.",
    ),
    strict: bool = typer.Option(False, "--strict", help="Relevant ids missing from the corpus are an error."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON on stdout, nothing else."),
    out: Path | None = typer.Option(
        None, "--out", help="Write summary.json, samples.csv, traces.jsonl and error_rates.json here."
    ),
    workdir: Path = WORKDIR,
    qdrant: str | None = QDRANT,
) -> None:
    """Score a retrieval run, or a pipeline end to end: hit_rate, recall, precision, MRR and nDCG at every k,
    with 95% bootstrap CIs."""
    from composer.data import load_corpus, load_questions, load_run
    from composer.evaluation import EvaluationReport, evaluate_pipeline, evaluate_run, render_report

    if (run is None) == (config is None):
        raise InputError(
            "give exactly one of --run RUN (score a run) or --config PIPELINE.yaml (run a pipeline)"
        )
    if config is not None and corpus is None:
        raise InputError("--config needs the corpus to index: add --corpus CORPUS", field="corpus")
    docs = load_corpus(corpus) if corpus is not None else None
    question_set = load_questions(questions, corpus=docs, strict=strict)
    report: EvaluationReport
    if run is not None:
        report = evaluate_run(question_set, load_run(run), ks=k, match=match, corpus=docs)
    else:
        from composer.cli.progress import pipeline_progress
        from composer.pipeline.pipeline import Pipeline

        assert config is not None and docs is not None
        with pipeline_progress(enabled=not as_json) as hook:
            pipeline = Pipeline.from_config(
                config, workdir=workdir, qdrant=qdrant, api_key=qdrant_api_key(), progress=hook
            )
            report = evaluate_pipeline(pipeline, docs, question_set, ks=k, match=match)
    if out is not None:
        report.save(out)
    if as_json:
        sys.stdout.write(report.summary_json() + "\n")
        return

    from rich.console import Console

    console = Console()
    console.print(render_report(report))
    if out is not None:
        console.print(f"report written to {out}")
