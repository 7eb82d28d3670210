"""`composer judges check|tune|labels`: can the judge be trusted? Measure its agreement with human labels,
search for a judge (model, prompt variant, few-shot examples) that agrees better, and collect people's
labels into one labels file (from their feedback in the MLflow UI, or a labels file checked)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from composer.cli.options import WORKDIR, flag
from composer.errors import InputError

if TYPE_CHECKING:
    from composer.judges.labels import Label

judges_app = typer.Typer(
    name="judges",
    help="Check LLM judges against human labels (`check`), search for a better one (`tune`), collect "
    "labels (`labels`).",
    no_args_is_help=True,
    add_completion=False,
)

LABELS = typer.Argument(
    ...,
    help="Labels: JSONL/JSON/CSV/XLSX/Parquet, one labelled answer per row (id, question, answer, "
    "contexts, reference_answer, metric, label 0/1 or 1-5, rationale); `composer label` writes a sheet to "
    "fill in, `composer judges labels` collects one.",
)
QUESTIONS = typer.Option(
    None, "--questions", help="Question set that fills each label's question and reference_answer by id."
)
LLM_BASE = typer.Option(
    None, "--llm-base", help="OpenAI-compatible base URL of the LLM server, e.g. http://127.0.0.1:11434/v1."
)
LLM_KEY_ENV = typer.Option(
    None, "--llm-key-env", help="Environment variable holding the API key (never the key itself)."
)
LLM_TIMEOUT = typer.Option(
    None, "--llm-timeout", min=0.1, help="Seconds per LLM request (default 60; raise for slow servers)."
)


@judges_app.command("check")
def check_command(
    labels: Path = LABELS,
    judge_model: str = typer.Option(
        ..., "--judge", help="litellm model that judges, as for `composer eval`."
    ),
    llm_base: str | None = LLM_BASE,
    llm_key_env: str | None = LLM_KEY_ENV,
    llm_timeout: float | None = LLM_TIMEOUT,
    metrics: list[str] = typer.Option(
        [],
        "--metrics",
        help="Judged metrics to check, repeated or comma-separated (default: every metric the labels have).",
    ),
    questions: Path | None = QUESTIONS,
    threshold: float = typer.Option(
        0.5, "--threshold", help="A judged score at least this high is a pass (for 0/1 labels)."
    ),
    as_json: bool = flag("--json", "Print the result as JSON on stdout, nothing else."),
    out: Path | None = typer.Option(None, "--out", help="Write check.json and judged.csv here."),
    experiment: str | None = typer.Option(
        None, "--experiment", "-e",
        help="Experiment YAML: log the check as a run of its MLflow experiment, in its store, and keep the "
        "agreement in its work dir. (An MLflow experiment name here is deprecated: --mlflow-experiment.)",
    ),
    mlflow_experiment: str | None = typer.Option(
        None, "--mlflow-experiment", help="Also log the check as a run of this MLflow experiment (by name)."
    ),
    tracking_uri: str | None = typer.Option(
        None, "--tracking-uri", help="MLflow tracking URI (default: the experiment's, else "
        "sqlite:///<workdir>/mlflow.db)."
    ),
    workdir: Path = WORKDIR,
) -> None:
    """Judge the labelled answers (replies cached: a rerun sends nothing) and report the judge's agreement
    with the labels per metric, language and answer length: accuracy, Cohen's kappa (quadratic-weighted
    for 1-5 ratings), Spearman, 95% bootstrap CIs, confusion matrices and the worst disagreements; the
    labels used and those left out, by why; the share of the judge's replies that could be read. Exits 1
    when most labels of a metric got no verdict of the judge's own (fallbacks, rules or missing): the
    judge is then not trusted, whatever its agreement on the rest."""
    import json

    from composer.calibration.check import check, judge_config, log_check

    store, name, workdir = _mlflow_target(experiment, mlflow_experiment, tracking_uri, workdir)
    found = read_labels(labels, questions)
    wanted = [m.strip() for value in metrics for m in value.split(",") if m.strip()]
    config = judge_config(
        judge_model,
        metrics=wanted or sorted({lb.metric for lb in found}),
        llm_base=llm_base,
        llm_key_env=llm_key_env,
        llm_timeout=llm_timeout,
    )
    result = check(found, config, workdir=workdir, threshold=threshold, source=str(labels))
    if out is not None:
        result.save(out)
    if name is not None:
        log_check(result, store, name)
    if as_json:
        sys.stdout.write(json.dumps(result.to_dict(), ensure_ascii=False) + "\n")
    else:
        from composer.console import make_console

        console = make_console()
        console.print(result.render())
        usage = result.usage
        lines = [line for c in result.metrics.values() for line in c.lines()]
        lines.append(f"judge calls: {usage.get('llm_calls', 0)} ({usage.get('llm_cached_calls', 0)} cached)")
        if out is not None:
            lines.append(f"check written to {out}")
        for line in lines:
            console.print(line, markup=False, highlight=False)
    if not result.trusted:
        raise typer.Exit(1)


def _mlflow_target(
    experiment: str | None, mlflow_experiment: str | None, tracking_uri: str | None, workdir: Path
) -> tuple[str, str | None, Path]:
    """(MLflow store, experiment name to log the check in or None, work dir): ``-e`` is an experiment
    YAML as everywhere else (its store, MLflow experiment and work dir); a value that is no YAML file is
    the old spelling of ``--mlflow-experiment``, still taken for one release with a warning."""
    from composer.study.experiment import load_experiment

    if experiment is not None and mlflow_experiment is not None:
        raise InputError("give --experiment EXPERIMENT.yaml or --mlflow-experiment NAME, not both",
                         field="mlflow_experiment")
    if experiment is not None and (Path(experiment).suffix.lower() in (".yaml", ".yml")
                                   or Path(experiment).is_file()):
        exp = load_experiment(experiment)
        return tracking_uri or exp.tracking_uri, exp.mlflow_experiment, exp.work_dir
    if experiment is not None:
        typer.echo(f"warning: --experiment {experiment} as an MLflow experiment name is deprecated and goes "
                   f"in the next release: write --mlflow-experiment {experiment} (-e/--experiment takes an "
                   "experiment YAML, as in every other command)", err=True)
        mlflow_experiment = experiment
    return tracking_uri or f"sqlite:///{workdir.resolve()}/mlflow.db", mlflow_experiment, workdir


@judges_app.command("tune")
def tune_command(
    labels: Path = LABELS,
    space: Path = typer.Option(
        ...,
        "--space",
        help="Judges to choose among (YAML): models, prompts (default, strict, lenient), shots (few-shot "
        "examples per metric and language), draws, metrics, held_out, seed, n_trials, api_base.",
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Write the chosen judge block here (YAML; an experiment's `judge: FILE`)."
    ),
    llm_base: str | None = LLM_BASE,
    llm_key_env: str | None = LLM_KEY_ENV,
    questions: Path | None = QUESTIONS,
    register: str | None = typer.Option(
        None, "--register", help="Register the chosen judge's verdict prompts (its variant and examples "
        "written in) as versions of NAME.<metric> in the MLflow Prompt Registry; --out then names them."
    ),
    tracking_uri: str | None = typer.Option(
        None, "--tracking-uri", help="MLflow store to register in (default: sqlite:///<workdir>/mlflow.db)."
    ),
    as_json: bool = flag("--json", "Print the trials and the held-out agreement as JSON on stdout."),
    workdir: Path = WORKDIR,
) -> None:
    """Search for the judge (model, prompt variant, few-shot examples from the labels in the answer's
    language) that agrees best with held-out labels it was never shown; replies cached: a rerun sends
    nothing. Prints every trial and the chosen judge's held-out agreement. With --register, the chosen
    judge's prompts become registry versions tagged with their kappa and the labels file's hash."""
    import json
    import logging

    import optuna

    from composer.calibration.tune import load_space, tune

    optuna.logging.set_verbosity(logging.WARNING)  # the table below lists every trial
    found = read_labels(labels, questions)
    chosen = load_space(space)
    update = {k: v for k, v in (("api_base", llm_base), ("api_key_env", llm_key_env)) if v is not None}
    if register is not None and tracking_uri is None:
        tracking_uri = f"sqlite:///{workdir.resolve()}/mlflow.db"
    result = tune(found, chosen.model_copy(update=update) if update else chosen, workdir=workdir,
                  source=str(labels))
    if register is not None:
        import hashlib

        from composer.calibration.tune import register_judge

        digest = hashlib.sha256(labels.read_bytes()).hexdigest()
        result = register_judge(result, register, tracking_uri=tracking_uri, labels_sha256=digest,
                                workdir=workdir)
    registered = result.registered()
    if out is not None:
        result.save(out)
    if as_json:
        sys.stdout.write(json.dumps(result.to_dict(), ensure_ascii=False) + "\n")
        return
    from composer.console import make_console

    console = make_console()
    console.print(result.render())
    usage = result.usage
    console.print(
        f"chosen: trial {result.best.number} ({result.best.model}, prompt {result.best.prompt}, "
        f"{result.best.shots} shots); judge calls: {usage.get('llm_calls', 0)} "
        f"({usage.get('llm_cached_calls', 0)} cached)"
        + (f"; judge block written to {out}" if out is not None else ""),
        markup=False,
        highlight=False,
    )
    for metric, uri in registered.items():
        console.print(f"{metric}: prompt registered as {uri}", markup=False, highlight=False)


@judges_app.command("labels")
def labels_command(
    out: Path = typer.Argument(..., help="Labels file to write (JSON Lines)."),
    experiment: str | None = typer.Option(
        None,
        "--experiment",
        help="MLflow experiment whose traces carry human feedback (source HUMAN) named "
        "after a judged metric (faithfulness, answer_correctness, llm_judge_rating...).",
    ),
    tracking_uri: str | None = typer.Option(
        None, "--tracking-uri", help="MLflow tracking URI (default: sqlite:///<workdir>/mlflow.db)."
    ),
    labels: Path | None = typer.Option(None, "--labels", help="A labels file to check and complete instead."),
    questions: Path | None = QUESTIONS,
    workdir: Path = WORKDIR,
) -> None:
    """Write a labels file (one labelled answer per line) from MLflow human feedback or a labels file."""
    import json

    from composer.files import write_atomic
    from composer.judges.labels import labels_from_mlflow

    if (experiment is None) == (labels is None):
        raise InputError("give exactly one of --experiment NAME (MLflow feedback) or --labels FILE")
    found: list[Label]
    if experiment is not None:
        uri = tracking_uri or f"sqlite:///{workdir.resolve()}/mlflow.db"
        found = labels_from_mlflow(uri, experiment)
        if not found:
            raise InputError(
                f"no human feedback named after a judged metric on the traces of {experiment!r}",
                field="experiment",
            )
    else:
        assert labels is not None
        found = read_labels(labels, questions)
    lines = [json.dumps(label_row(lb), ensure_ascii=False) for lb in found]
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, "\n".join(lines) + "\n")
    counts = ", ".join(f"{m} {n}" for m, n in Counter(lb.metric for lb in found).most_common())
    typer.echo(f"{len(found)} labels written to {out} ({counts})")


def label_row(label: Label) -> dict[str, object]:
    """A label as a row of the labels file (what ``load_labels`` reads back)."""
    row: dict[str, object] = {
        "id": label.id,
        "question": label.question,
        "answer": label.answer,
        "contexts": list(label.contexts),
        "reference_answer": label.reference_answer,
        "metric": label.metric,
        "label": label.label,
        "rationale": label.rationale,
    }
    return {k: v for k, v in row.items() if v is not None}


def read_labels(labels: Path, questions: Path | None) -> list[Label]:
    """The labels file, questions filled in from ``--questions`` by id."""
    from composer.data import load_questions
    from composer.judges.labels import load_labels

    question_set = load_questions(questions) if questions is not None else None
    return load_labels(labels, questions=list(question_set) if question_set is not None else None)
