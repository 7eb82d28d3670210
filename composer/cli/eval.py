"""`composer eval`: score a retrieval run, or run a pipeline end to end (answers and LLM judges included)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from composer.cli.options import ALLOW_ENV, QDRANT, WORKDIR, flag
from composer.data.ranking import HitOrder
from composer.errors import ComposerError, InputError
from composer.metrics.matching import MatchMode
from composer.protocols import Split

if TYPE_CHECKING:
    from composer.data.types import Corpus, QuestionSet
    from composer.evaluation import EvaluationReport
    from composer.evaluation.gate import Scores
    from composer.evaluation.judging import Judging
    from composer.pipeline.config import PipelineConfig


def eval_command(
    questions: Path = typer.Argument(
        ..., help="Question set: JSONL, JSON, CSV, XLSX or Parquet with id, question, relevant_ids..."
    ),
    run: Path | None = typer.Option(
        None,
        "--run",
        help='Retrieval run to score: JSONL {"id": question id, "results": [{"id", "score"?, "text"?}], '
        '"answer"?} or a TREC run file. Answers are graded (by the LLM with --judge).',
    ),
    order: HitOrder = typer.Option(
        "auto",
        "--order",
        help="How a --run is ranked: score (trec_eval: score descending, equal scores by id), given (the "
        "file's order), auto (given where a question's scores are all equal or absent, else score).",
    ),
    config: Path | None = typer.Option(
        None, "--config", help="Pipeline YAML to run end to end instead of scoring a --run (indexed on "
        "--corpus; without it, the index saved for it in the work dir is reopened)."
    ),
    split: Split = typer.Option(
        "all",
        "--split",
        help="With --config best.yaml from `composer export`: score the study's selection questions (the "
        "trials' figures) or its held-out ones, split as the study split them; all: every question.",
    ),
    k: list[int] = typer.Option(
        [1, 3, 5, 10], "--k", help="Cutoffs, e.g. --k 1 3 5 10 (those the objective and a gate's --metric "
        "read are added)."
    ),
    match: MatchMode | None = typer.Option(
        None,
        "--match",
        help="What counts as relevant (default: chosen from the labels): document ids, chunk ids, chunks "
        "containing a gold answer, or text matching the gold context.",
    ),
    corpus: Path | None = typer.Option(
        None,
        "--corpus",
        help="Corpus (JSONL/JSON/CSV/Parquet or a folder of documents): checks relevant ids and gives "
        "the texts that answer and context matching read.",
    ),
    strict: bool = flag(
        "--strict",
        "Relevant ids missing from the corpus are an error, and failed samples (LLM calls that gave up) "
        "beyond the judge's share of 10% end the eval; without it they are listed and the rest scored.",
    ),
    llm: str | None = typer.Option(
        None,
        "--llm",
        help="litellm model that answers (e.g. ollama/qwen2.5, openai/gpt-4o-mini; overrides the config's "
        "generation.model). Without any, answers are extractive.",
    ),
    judge_model: str | None = typer.Option(
        None, "--judge", help="litellm model that judges the answers (default: the --llm model)."
    ),
    llm_base: str | None = typer.Option(
        None, "--llm-base", help="OpenAI-compatible base URL of the LLM server, e.g. http://127.0.0.1:11434/v1."
    ),
    llm_key_env: str | None = typer.Option(
        None, "--llm-key-env", help="Environment variable holding the API key (never the key itself)."
    ),
    llm_timeout: float | None = typer.Option(
        None, "--llm-timeout", min=0.1, help="Seconds per LLM request (default 60; raise for slow servers)."
    ),
    metrics: list[str] = typer.Option(
        [],
        "--metrics",
        help="LLM metrics, repeated or comma-separated: answer_correctness, faithfulness, llm_judge_rating, "
        "answer_relevancy, context_precision, context_recall (default with an LLM: answer_correctness, "
        "faithfulness).",
    ),
    baseline: Path | None = typer.Option(
        None,
        "--baseline",
        help="CI gate: an earlier `eval --out` folder, or a pipeline YAML scored on the same questions. "
        "Exits 1 when this system is significantly worse (95% paired bootstrap CI of the difference below "
        "0) or worse by more than --margin; 0 otherwise.",
    ),
    metric: str = typer.Option(
        "composite", "--metric", help="What the gate compares: composite (the objective's), or a metric "
        "such as ndcg@10, recall@5, token_f1."
    ),
    margin: float = typer.Option(
        0.0, "--margin", min=0.0, help="The gate's tolerance: a drop in the mean up to this passes."
    ),
    objective: str | None = typer.Option(
        None,
        "--objective",
        help="The objective whose composite is reported and gated: a YAML file (an exported best.yaml, an "
        "experiment) or weights, e.g. recall@10=1,ndcg@10=1 (default: the --config export's objective).",
    ),
    as_json: bool = flag("--json", "Print the summary as JSON on stdout, nothing else."),
    out: Path | None = typer.Option(
        None, "--out", help="Write summary.json, samples.csv, traces.jsonl and error_rates.json here."
    ),
    workdir: Path = WORKDIR,
    qdrant: str | None = QDRANT,
    allow_env: list[str] | None = ALLOW_ENV,
) -> None:
    """Score a retrieval run, or a pipeline end to end: hit_rate, recall, precision, MRR and nDCG at every k,
    answers with their deterministic scores and, with an LLM, judged answer_correctness, faithfulness...
    with 95% bootstrap CIs, tokens, cost and error rates."""
    from composer.data import load_corpus, read_ranking_file
    from composer.evaluation import evaluate_ranking
    from composer.evaluation.gate import (
        COMPOSITE,
        Scores,
        cutoffs_to_score,
        run_gate,
        stated_objective,
        with_objective,
    )
    from composer.llm.spend import Spend

    _check_sources(run, config, corpus, llm)
    if baseline is None and (metric != COMPOSITE or margin):
        raise InputError("--metric and --margin set the gate: give --baseline OLD", field="baseline")
    stated = stated_objective(objective, config, baseline)
    k = cutoffs_to_score(k, stated[0] if stated else None, metric if baseline is not None else None)
    old = _baseline(baseline, corpus, llm, llm_base, llm_key_env) if baseline is not None else None
    wanted = [m.strip() for value in metrics for m in value.split(",") if m.strip()]
    docs = load_corpus(corpus) if corpus is not None else None
    question_set = _question_set(questions, docs, config, split, strict)
    spend = Spend()  # every request by purpose: the test requests, the scoring
    with spend.counting(), spend.track("eval"):
        report: EvaluationReport
        if run is not None:
            given = read_ranking_file(run)
            judging = _run_judging(run, bool(given.answers), judge_model, llm_base, llm_key_env, llm_timeout,
                                   wanted, workdir, strict)
            report = evaluate_ranking(question_set, given.hits, ks=k, match=match, corpus=docs, order=order,
                                  answers=given.answers or None, judging=judging)
        else:
            assert config is not None
            pipeline_config = _pipeline_config(config, llm, llm_base, llm_key_env)
            settings = _run_llm(pipeline_config, judge_model, llm_timeout)
            judging = _judging(pipeline_config, settings, judge_model, llm_base, llm_key_env, wanted, workdir,
                               strict)
            _check_llms(pipeline_config, settings, judging)
            report = _run_pipeline(pipeline_config, settings, judging, docs, question_set, k, match, workdir,
                                   qdrant, progress=not as_json)
        if stated is not None:
            report = with_objective(report, stated[0], stated[1])
        if old is not None:
            assert baseline is not None
            if not isinstance(old, Scores):
                assert docs is not None  # _baseline asked for the corpus
                old = Scores.of(_run_pipeline(old, _run_llm(old, judge_model, llm_timeout), judging, docs,
                                              question_set, k, match, workdir, qdrant, progress=not as_json),
                                str(baseline))
            report = report.with_gate(run_gate(report, str(questions), old, metric=metric, margin=margin))
    if spend.by_purpose:
        report = report.with_meta({"llm_by_purpose": spend.ordered()})
    if out is not None:
        report.save(out)
    _refuse_all_failed(report)
    if as_json:
        sys.stdout.write(report.summary_json() + "\n")
    else:
        _print_report(report, out, answers="from the run file" if run is not None else None)
    if report.gate is not None and not report.gate.passed:
        raise typer.Exit(report.gate.exit_code)


def _baseline(
    baseline: Path, corpus: Path | None, llm: str | None, llm_base: str | None, llm_key_env: str | None
) -> Scores | PipelineConfig:
    """What the gate compares against, read before any work: an ``eval --out`` folder's per-question
    scores, or the pipeline to score (with the command line's LLM flags, as the new one)."""
    from composer.evaluation.gate import check_baseline_file, read_scores

    if baseline.is_dir():
        return read_scores(baseline)
    if baseline.suffix.lower() not in (".yaml", ".yml"):
        what = "no such folder or file" if not baseline.exists() else "not a folder nor a YAML file"
        raise InputError(f"{what}: --baseline takes an `eval --out` folder or a pipeline YAML", path=baseline)
    if corpus is None:
        raise InputError("--baseline PIPELINE.yaml indexes the corpus: add --corpus CORPUS", field="corpus")
    check_baseline_file(baseline)
    return _pipeline_config(baseline, llm, llm_base, llm_key_env)


def _check_sources(run: Path | None, config: Path | None, corpus: Path | None, llm: str | None) -> None:
    """What to score comes from exactly one place, before anything is read: a run file, or a pipeline
    (indexed on the corpus, or reopened from the index saved for it); a run has no pipeline for --llm to
    answer with."""
    if (run is None) == (config is None):
        raise InputError(
            "give exactly one of --run RUN (score a run) or --config PIPELINE.yaml (run a pipeline)"
        )
    if run is not None and llm is not None:
        raise InputError("--llm: answers need a pipeline: give --config PIPELINE.yaml instead of --run (a "
                         "run's own answers, its 'answer' fields, are judged with --judge MODEL)")


def _question_set(
    questions: Path, docs: Corpus | None, config: Path | None, split: Split, strict: bool
) -> QuestionSet:
    """The questions to score: all of them, or the study's selection or held-out share (``--split``),
    which only an exported pipeline (``--config``) records."""
    from composer.data import load_questions

    question_set = load_questions(questions, corpus=docs, strict=strict)
    if split == "all":
        return question_set
    if config is None:
        raise InputError("--split takes the study's split from an exported best.yaml: give --config",
                         field="split")
    from composer.evaluation.splits import study_split

    return study_split(question_set, config, split)


def _run_judging(
    run: Path,
    has_answers: bool,
    judge_model: str | None,
    llm_base: str | None,
    llm_key_env: str | None,
    llm_timeout: float | None,
    metrics: list[str],
    workdir: Path,
    strict: bool,
) -> Judging | None:
    """The judge of a run file's own answers with --judge, else None; a judge's flag without --judge, or
    a judge with no answers or no LLM metric to grade, is an error rather than silently unused."""
    if judge_model is None:
        judge_flags = {"--llm-base": llm_base, "--llm-key-env": llm_key_env, "--llm-timeout": llm_timeout,
                       "--metrics": metrics or None}
        named = ", ".join(name for name, v in judge_flags.items() if v is not None)
        if named:
            raise InputError(f"{named}: set the judge of the run's answers with --judge MODEL")
        return None
    if not has_answers:
        raise InputError("--judge grades answers, and the run has none: give each line an 'answer'",
                         path=run, field="answer")
    from composer.pipeline.config import PipelineConfig

    no_pipeline = PipelineConfig()
    settings = _run_llm(no_pipeline, judge_model, llm_timeout)
    judging = _judging(no_pipeline, settings, judge_model, llm_base, llm_key_env, metrics, workdir, strict)
    if judging is None:
        raise InputError(f"--metrics {', '.join(metrics)}: none is judged by an LLM", field="metrics")
    _check_llms(no_pipeline, settings, judging)
    return judging


def _pipeline_config(
    config: Path, llm: str | None, llm_base: str | None, llm_key_env: str | None
) -> PipelineConfig:
    """The pipeline file with the command line's LLM flags over its ``generation:`` settings."""
    from composer.pipeline.config import load_pipeline_config

    generation = {"model": llm, "api_base": llm_base, "api_key_env": llm_key_env}
    overrides = {"generation": {key: v for key, v in generation.items() if v is not None}}
    return load_pipeline_config(config, overrides)


def _run_pipeline(
    config: PipelineConfig,
    settings: Any,
    judging: Judging | None,
    docs: Corpus | None,
    questions: QuestionSet,
    ks: list[int],
    match: MatchMode | None,
    workdir: Path,
    qdrant: str | None,
    *,
    progress: bool,
) -> EvaluationReport:
    """Index the corpus (None: reopen the index saved for the config in ``workdir``) and score the pipeline
    on the questions, with a progress display unless the output is JSON (stdout then holds nothing else)."""
    from composer.cli.progress import pipeline_progress
    from composer.evaluation import evaluate_pipeline
    from composer.pipeline.pipeline import Pipeline
    from composer.retrieval.conversation import follow_up_warning

    if (line := follow_up_warning(questions.questions, config.conversation)) is not None:
        logging.getLogger("composer.retrieval.conversation").warning(line)
    with pipeline_progress(enabled=progress) as hook:
        pipeline = Pipeline.from_config(config, workdir=workdir, qdrant=qdrant, progress=hook, llm=settings)
        return evaluate_pipeline(pipeline, docs, questions, ks=ks, match=match, judging=judging)


def _refuse_all_failed(report: EvaluationReport) -> None:
    """A report with no sample scored is no score: an error naming the first failure (a dead server, a
    bad key), not a table of zeros."""
    failed = report.table.errors
    if failed and len(failed) == len(report):
        first = next(iter(failed.values()))
        raise ComposerError(f"every one of the {len(report)} samples failed; the first: {first.stage}: "
                            f"{first.kind}: {first.message}")
    rescued = report.meta.get("llm", {}).get("error_rates", {}).get("judge_fallback_samples", 0)
    if len(report) and rescued == len(report):
        # Every judged score is the fallback's: no judge verdict at all, whatever the table says.
        raise ComposerError(f"the judge failed on every one of the {len(report)} samples (each was scored by "
                            "its deterministic fallback instead): check the judge's model, endpoint and key")


def _print_report(report: EvaluationReport, out: Path | None, answers: str | None) -> None:
    """The report as tables, then the failed samples, the LLM usage line (``answers``: where answers no
    LLM generated came from) and where the files went."""
    from composer.console import make_console
    from composer.evaluation import render_report
    from composer.evaluation.render import render_breakdowns
    from composer.llm.spend import purpose_line

    console = make_console()
    console.print(render_report(report))
    if (by_turn := render_breakdowns(report)) is not None:
        console.print(by_turn)
    for line in failed_sample_lines(report):
        console.print(line, markup=False, highlight=False)
    if "llm" in report.meta:
        console.print(_llm_line(report.meta["llm"], answers), markup=False, highlight=False)
    if "llm_by_purpose" in report.meta:
        console.print(f"LLM requests by purpose: {purpose_line(report.meta['llm_by_purpose'])}", markup=False,
                      highlight=False)
    if "objective" in report.meta:
        stated = report.meta["objective"]
        weights = ", ".join(f"{k} {w:.3g}" for k, w in stated["weights"].items())
        console.print(f"composite {stated['composite']:.4f} (objective of {stated['source']}: {weights})",
                      markup=False, highlight=False)
    if report.gate is not None:
        from composer.evaluation.gate import render_gate

        console.print(render_gate(report.gate))
    if out is not None:
        console.print(f"report written to {out}", markup=False, highlight=False)


def _run_llm(config: PipelineConfig, judge_model: str | None, timeout: float | None) -> Any:
    """The run's LLM settings (the per-request timeout) for whichever model is in play."""
    from composer.llm import LLMConfig

    model = config.generation.model or judge_model
    if model is None or timeout is None:
        return None
    return LLMConfig(model=model, timeout=timeout)


def _check_llms(config: PipelineConfig, settings: Any, judging: Judging | None) -> None:
    """The preflight optimize has: every LLM the evaluation calls answers a test request before any work,
    so a dead server or a missing key is one line in seconds, not a failed sample after another."""
    from composer.llm.preflight import check_reachable

    generator = config.generation.llm_config(settings)
    judge_llm = judging.client.config if judging is not None else None
    check_reachable([c for c in (generator, judge_llm) if c is not None], before="the evaluation started")


def _judging(
    config: PipelineConfig,
    settings: Any,
    judge_model: str | None,
    llm_base: str | None,
    llm_key_env: str | None,
    metrics: list[str],
    workdir: Path,
    strict: bool,
) -> Judging | None:
    """The judge when one is asked for or an LLM answers; a clear error when judge metrics lack an LLM.
    Unless ``strict``, failed samples never end the eval: on 5 questions one failure would (the judge's
    share allows none), so they are listed and the rest scored."""
    from composer.evaluation.judging import make_judging
    from composer.judges import GENERATION_METRICS, JUDGE_METRICS, JudgeConfig, require_llm

    unknown = [m for m in metrics if m not in GENERATION_METRICS]
    if unknown:
        raise InputError(f"unknown metric(s) {unknown}; LLM metrics: {', '.join(JUDGE_METRICS)}",
                         field="metrics")
    generator = config.generation.llm_config(settings)
    require_llm(metrics, generator, judge_model)
    judged = [m for m in metrics if m in JUDGE_METRICS]
    if generator is None and judge_model is None:
        return None
    fields: dict[str, Any] = {"model": judge_model}
    if metrics:  # refusal metrics alone need answers, not a judge
        if not judged:
            return None
        fields["metrics"] = judged
    if generator is None:  # the judge alone: the endpoint flags are its own
        fields.update(api_base=llm_base, api_key_env=llm_key_env)
    if settings is not None:
        fields["timeout"] = settings.timeout
    if not strict:
        fields["max_failure_share"] = 1.0
    return make_judging(JudgeConfig.model_validate(fields), generator, workdir)


def failed_sample_lines(report: EvaluationReport, limit: int = 20) -> list[str]:
    """Which questions failed and why, so that a score over the rest is read as such."""
    errors = report.table.errors
    if not errors:
        return []
    ids = report.table.question_ids
    lines = [f"{len(errors)} of {len(report)} samples failed (scored without them):"]
    for row, error in sorted(errors.items())[:limit]:
        lines.append(f"  {ids[row]}: {error.stage}: {error.kind}: {' '.join(error.message.split())[:200]}")
    if len(errors) > limit:
        lines.append(f"  ... and {len(errors) - limit} more (see samples.csv with --out)")
    return lines


def _llm_line(section: dict[str, Any], answers: str | None = None) -> str:
    """The LLM usage line; ``answers`` says where answers no LLM generated came from (default: the
    pipeline's extractive answerer)."""
    usage, rates = section["usage"], section["error_rates"]
    cost = f"${usage['llm_cost_usd']:.4f}"
    if usage["llm_unpriced_requests"]:
        cost += f" (+{usage['llm_unpriced_requests']} unpriced requests)"
    parts = [
        f"LLM: answers {section['generator'] or answers or 'extractive'}, judge {section['judge'] or 'none'}",
        f"{usage['llm_calls']} calls ({usage['llm_cached_calls']} cached, {usage['llm_requests']} requests)",
        f"{usage['llm_prompt_tokens']:,} prompt + {usage['llm_completion_tokens']:,} completion tokens",
        cost,
        f"{rates['failed_samples']} failed samples",
    ]
    if rates.get("judge_fallback_samples"):
        parts.append(f"{rates['judge_fallback_samples']} scored by the judge's fallback (the judge failed)")
    if section.get("llm_judge_rating"):
        parts.append(f"rating {section['llm_judge_rating']}")
    return " · ".join(parts)
