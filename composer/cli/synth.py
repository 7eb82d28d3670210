"""`composer synth`: write a labelled question set from a corpus with an LLM, and a report on it."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from composer.cli.options import WORKDIR
from composer.errors import InputError

if TYPE_CHECKING:
    from rich.table import Table

    from composer.synth import SynthConfig
    from composer.synth.engine import SynthOutcome

REVIEW_ROWS = 12


def synth_command(
    corpus: Path = typer.Argument(..., help="Corpus: JSONL/JSON/CSV/Parquet, or a folder of documents."),
    n: int = typer.Option(200, "--n", min=1, help="Questions to keep after the filters."),
    llm: str = typer.Option(..., "--llm", help="litellm model that writes and checks the questions."),
    out: Path = typer.Option(
        ..., "--out", help="Question set to write (JSONL, read as is by eval/optimize)."
    ),
    llm_base: str | None = typer.Option(
        None,
        "--llm-base",
        help="OpenAI-compatible base URL of the LLM server, e.g. http://127.0.0.1:11434/v1.",
    ),
    api_key_env: str | None = typer.Option(
        None,
        "--api-key-env",
        "--llm-key-env",
        help="Environment variable holding the API key (never the key).",
    ),
    lang: str = typer.Option(
        "auto", "--lang", help="Prompt language: auto (each passage's own), ar, fa or en."
    ),
    seed: int = typer.Option(0, "--seed", help="Fixes the passages and their order: same seed, same set."),
    mix: str | None = typer.Option(
        None,
        "--mix",
        help="Kinds and weights, e.g. factoid=0.4,conceptual=0.3,multi_hop=0.2,unanswerable=0.1.",
    ),
    min_chars: int = typer.Option(
        150, "--min-chars", min=1, help="Shortest passage asked about (characters)."
    ),
    max_chars: int = typer.Option(
        1200, "--max-chars", min=50, help="Longest passage asked about (characters)."
    ),
    conversations: int = typer.Option(
        0, "--conversations", min=0,
        help="Write this many conversations (one per line: a first question, then follow-ups that lean on "
        "it, each with its standalone rewrite) instead of single questions; --n and --mix do not apply.",
    ),
    follow_ups: int = typer.Option(
        2, "--follow-ups", min=1, max=8, help="Follow-up questions per conversation (with --conversations)."
    ),
    concurrency: int = typer.Option(8, "--concurrency", min=1, help="LLM requests in flight at most."),
    timeout: float = typer.Option(60.0, "--timeout", min=0.1, help="Seconds per LLM request."),
    retries: int = typer.Option(
        5, "--retries", min=0, help="Retries per call on 429, 5xx, timeouts, bad replies."
    ),
    report_path: Path | None = typer.Option(
        None, "--report", help="Report to write (JSON; default: OUT with .report.json)."
    ),
    review: bool = typer.Option(False, "--review", help="Print a sample of the kept questions to read.",
                                metavar=""),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout, nothing else.",
                                 metavar=""),
    tracking_uri: str | None = typer.Option(
        None, "--tracking-uri", help="MLflow store for the report (default sqlite:///<workdir>/mlflow.db)."
    ),
    mlflow_experiment: str | None = typer.Option(
        None, "--mlflow-experiment", help="Log the report as a run of this MLflow experiment."
    ),
    workdir: Path = WORKDIR,
) -> None:
    """Generate factoid, conceptual, multi-hop and unanswerable questions in each passage's language
    (Arabic, Persian, English), keep those that pass the filters, and write them with their gold documents,
    answers and context spans. Replies are cached: a rerun with the same seed sends no request."""
    from composer.data import load_corpus
    from composer.llm import LLMClient
    from composer.synth import require_questions, synthesize

    weights = _mix_weights(mix)
    llm_fields = {"model": llm, "api_base": llm_base, "api_key_env": api_key_env, "timeout": timeout,
                  "max_concurrency": concurrency, "max_retries": retries}
    fields: dict[str, Any] = {"n": n, "lang": lang, "seed": seed, "min_passage_chars": min_chars,
                              "max_passage_chars": max_chars, "conversations": conversations,
                              "follow_ups": follow_ups}
    config = _synth_config({**fields, **({"mix": weights} if weights else {})}, llm_fields)
    docs = load_corpus(corpus)
    from composer.llm.preflight import check_reachable
    from composer.llm.spend import Spend, purpose

    spend = Spend()  # every request by purpose: the test request, the generation
    with spend.counting():
        check_reachable([config.llm], before="generating questions")
        with purpose("synth"):
            outcome = synthesize(docs, config, LLMClient(config.llm, cache_dir=workdir / "cache" / "llm"))
    require_questions(outcome)
    outcome.report["llm_by_purpose"] = spend.ordered()
    report_file = report_path or out.with_suffix(".report.json")
    report = _write_files(outcome, out, report_file)
    if mlflow_experiment is not None:
        report["mlflow_run_id"] = _log_to_mlflow(report, out, mlflow_experiment, tracking_uri, workdir)
    if as_json:
        sys.stdout.write(json.dumps(report, ensure_ascii=False) + "\n")
        return

    from composer.console import make_console

    console = make_console()
    if review:
        table = conversation_table if conversations else review_table
        console.print(table(outcome.rows, docs_seed=seed))
    for line in summary_lines(report, out, report_file):
        console.print(line, highlight=False)


def _mix_weights(mix: str | None) -> dict[str, float] | None:
    """``--mix``'s kinds and weights; a malformed one is an input error naming the option."""
    from composer.synth import parse_mix

    if mix is None:
        return None
    try:
        return parse_mix(mix)
    except ValueError as exc:
        raise InputError(str(exc), field="mix") from None


def _synth_config(fields: dict[str, Any], llm_fields: dict[str, Any]) -> SynthConfig:
    """The run's settings from the command line, checked as a config file's would be: a bad value is a
    config error naming the command line, not a traceback."""
    from pydantic import ValidationError

    from composer.errors import config_error
    from composer.llm import LLMConfig
    from composer.synth import SynthConfig

    try:
        return SynthConfig.model_validate({**fields, "llm": LLMConfig(**llm_fields)})
    except ValidationError as exc:
        raise config_error(exc, "command line") from None


def _write_files(outcome: SynthOutcome, out: Path, report_file: Path) -> dict[str, Any]:
    """Write the question set and its report (which names the set); the report written."""
    from composer.synth.output import write_questions, write_report

    write_questions(outcome.rows, out)
    report = {**outcome.report, "out": str(out)}
    write_report(report, report_file)
    return report


def _log_to_mlflow(
    report: dict[str, Any], out: Path, experiment: str, tracking_uri: str | None, workdir: Path
) -> str:
    """Log the report as a run of ``experiment`` (default store: the workdir's); the run's id."""
    from composer.study.experiment import default_tracking_uri
    from composer.tracking.synth import log_report_to_mlflow

    uri = tracking_uri or default_tracking_uri(workdir)
    return log_report_to_mlflow(report, uri, experiment, questions=out)


def review_table(rows: list[dict[str, Any]], *, docs_seed: int) -> Table:
    """A seeded sample, every kind represented, for a person to read before trusting the set."""
    from rich.table import Table
    from rich.text import Text

    by_kind: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_kind.setdefault(row["metadata"]["kind"], []).append(row)
    rng = random.Random(docs_seed)
    share = max(1, REVIEW_ROWS // max(1, len(by_kind)))
    sample = [r for group in by_kind.values() for r in rng.sample(group, min(share, len(group)))]
    table = Table(title=f"{len(sample)} of {len(rows)} generated questions", show_lines=True)
    for column in ("kind", "question", "answer", "passage", "doc"):
        table.add_column(column, overflow="fold")
    for row in sample:
        meta = row["metadata"]
        cells = (
            meta["kind"],
            row["question"],
            row["reference_answer"] or "(unanswerable)",
            _excerpt(row),
            ", ".join(meta["source_doc_ids"]),
        )
        table.add_row(*(Text(c) for c in cells))  # Text: brackets in a question are not Rich markup
    return table


def conversation_table(rows: list[dict[str, Any]], *, docs_seed: int) -> Table:
    """A seeded sample of conversations, one line per user turn with its rewrite and answer."""
    from rich.table import Table
    from rich.text import Text

    sample = random.Random(docs_seed).sample(rows, min(len(rows), REVIEW_ROWS // 3))
    table = Table(title=f"{len(sample)} of {len(rows)} generated conversations", show_lines=True)
    for column in ("conversation", "turn", "question", "standalone", "answer"):
        table.add_column(column, overflow="fold")
    for row in sample:
        users = [t for t in row["turns"] if t["role"] == "user"]
        for number, turn in enumerate(users, 1):
            rewrite = turn.get("standalone", "")
            cells = (row["id"], str(number), turn["text"], rewrite, turn["reference_answer"])
            table.add_row(*(Text(c) for c in cells))
    return table


def _excerpt(row: dict[str, Any], width: int = 90) -> str:
    """The context around the answer span (or the passage's start), at most ``width`` characters."""
    meta = row["metadata"]
    if row["context"] and "answer_start" in meta:
        text = row["context"][meta["answer_context"]]
        start = max(0, meta["answer_start"] - width // 3)
    else:
        texts = row["context"] or []
        if not texts:
            return "(source: " + ", ".join(meta["source_doc_ids"]) + ")"
        text, start = texts[0], 0
    piece = " ".join(text[start : start + width].split())
    return ("…" if start else "") + piece + ("…" if start + width < len(text) else "")


def summary_lines(report: dict[str, Any], out: Path, report_file: Path) -> list[str]:
    """What was kept, dropped and paid for, as Rich markup lines (user text escaped)."""
    from rich.markup import escape

    from composer.llm.spend import purpose_line

    kinds = ", ".join(f"{k} {v['kept']}/{v['target']}" for k, v in report["by_kind"].items() if v["target"])
    dropped = ", ".join(f"{r} {n}" for r, n in report["dropped"].items() if n) or "none"
    usage = report["llm"]
    cost = f"${usage['llm_cost_usd']:.4f}"
    if usage["llm_unpriced_requests"]:
        cost += f" (+{usage['llm_unpriced_requests']} unpriced requests)"
    unit = "conversations" if "turns" in report else "questions"
    lines = [
        f"kept {report['kept']} of {report['n']} {unit} ({kinds}) from {report['generated']} generated "
        f"in {report['rounds']} rounds, {report['seconds']:.1f}s",
        f"dropped: {dropped}",
        f"LLM: {usage['llm_calls']} calls ({usage['llm_cached_calls']} cached, {usage['llm_requests']} "
        f"requests), {usage['llm_prompt_tokens']:,} prompt + {usage['llm_completion_tokens']:,} completion "
        f"tokens, {cost}, {usage['llm_failed_calls']} failed calls",
    ]
    if "turns" in report:
        turns = report["turns"]
        lines.insert(1, f"user turns kept: {turns['kept']} ({turns['follow_ups']} follow-ups)")
    if report.get("llm_by_purpose"):
        lines.append(f"LLM requests by purpose: {purpose_line(report['llm_by_purpose'])}")
    if report["shortfall"]:
        lines.append(
            f"[yellow]warning:[/] {report['shortfall']} short of {report['n']}: the attempt budget "
            f"({report['attempt_budget']} calls) ran out; see the dropped reasons"
        )
    lines += [escape(f"note: {note}") for note in report["notes"]]
    lines.append(escape(f"wrote {out} and {report_file}"))
    if "mlflow_run_id" in report:
        lines.append(f"MLflow run {report['mlflow_run_id']}")
    return lines
