"""`composer optimize`: run (or continue) an Optuna study over pipeline configurations."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from composer.cli.options import ALLOW_ENV, checked_study_name, flag
from composer.errors import ComposerError, InputError, StudyStopped

if TYPE_CHECKING:
    from composer.study.experiment import ExperimentConfig
    from composer.summary import HeldOut


def optimize_command(
    experiment: Path = typer.Argument(..., help="Experiment YAML (data, search space, objective...)."),
    n_trials: int | None = typer.Option(
        None, "--n-trials", min=1, help="Total finished trials to reach (default: the experiment's n_trials)."
    ),
    study_name: str | None = typer.Option(
        None, "--study-name", help="Study to create or continue (default: the experiment's name).",
        callback=checked_study_name,
    ),
    storage: str | None = typer.Option(
        None, "--storage", help="Optuna storage URL, overriding the experiment's: e.g. a PostgreSQL URL "
        "shared by several `composer optimize` workers of one study, on one machine or many.",
    ),
    workdir: Path | None = typer.Option(
        None, "--workdir", help="Work dir (caches, indexes, default stores), overriding the experiment's "
        "workdir: (default: .composer beside the experiment file).",
    ),
    max_questions: int | None = typer.Option(
        None, "--max-questions", min=1, help="Use only N of the questions (a smoke study), a stratified "
        "pick, overriding the experiment's max_questions.",
    ),
    strict: bool = flag("--strict", "Relevant ids missing from the corpus are an error."),
    estimate: bool = flag("--estimate", "Run nothing: print the LLM calls, tokens and dollars the study "
                          "would take, per stage and in all (no request is sent)."),
    as_json: bool = flag("--json", "With --estimate: print the estimate as JSON."),
    ray: str | None = typer.Option(
        None, "--ray", metavar="ADDRESS", help="Run the study's workers on Ray: local (start Ray here), auto "
        "(the cluster this machine belongs to) or ray://HOST:10001; overrides the experiment's executor.",
    ),
    workers: int | None = typer.Option(
        None, "--workers", min=1, help="Ray workers (with --ray or the experiment's executor; default 2).",
    ),
    allow_env: list[str] | None = ALLOW_ENV,
) -> None:
    """Search the configuration space; every trial goes to MLflow. Run it again to continue the study."""
    from composer.cost.render import actual_line
    from composer.llm.spend import purpose_line
    from composer.redact import scrub_url
    from composer.study import budget
    from composer.study.experiment import load_experiment
    from composer.study.leaderboard import failure_causes, render_leaderboard, report_console
    from composer.study.study import load_study, run_study

    # MLflow logs its table migrations and trace flushes at INFO; the live view is the progress report.
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    exp = load_experiment(experiment)
    if storage is not None:
        exp = exp.model_copy(update={"storage": storage})
    if workdir is not None:
        exp = exp.model_copy(update={"workdir": workdir.resolve()})
    if max_questions is not None:
        exp = exp.model_copy(update={"max_questions": max_questions})
    if as_json and not estimate:
        raise InputError("--json prints an estimate: give --estimate too", field="json")
    exp = _with_ray(exp, ray, workers)
    if estimate:
        _print_estimate(exp, n_trials, study_name, strict, as_json)
        return
    err = report_console(stderr=True)
    if exp.executor is not None and exp.executor.ray is not None:
        from composer.cluster.driver import optimize_on_ray

        result = optimize_on_ray(exp, n_trials=n_trials, study_name=study_name, console=err, strict=strict)
    else:
        result = run_study(exp, n_trials=n_trials, study_name=study_name, console=err, strict=strict)
    causes = failure_causes(load_study(result.name, exp.storage_url).get_trials(deepcopy=False))
    for line in failure_lines(causes):
        err.print(line, markup=False, highlight=False)
    summary = result.summary
    if summary.n_complete == 0 and causes:
        spent = budget.reason(exp.stop, result.study)  # a spent budget is no bad input: exit 1, not 2
        why = spent or f"the most frequent failure: {causes[0][0]}"
        error = ComposerError if spent is None else StudyStopped
        raise error(f"no trial of study {result.name} completed; {why}")
    out = report_console()
    out.print(render_leaderboard(result.leaderboard, title=f"study {result.name}", limit=10))
    if summary.best_trial is not None and summary.best_value is not None:
        out.print(f"best: trial #{summary.best_trial}, composite {summary.best_value:.4f}", highlight=False)
    enc = summary.encode
    out.print(f"indexes: {enc.unique_index_keys} unique keys, {enc.index_builds} built "
              f"({enc.encode_passes} encode passes), {enc.index_reuses} reused; "
              f"{enc.repeats_skipped} repeated configs answered from earlier trials", highlight=False)
    llm = summary.llm_usage
    if llm:
        out.print(f"LLM: {llm['llm_requests']:.0f} requests sent "
                  f"({purpose_line(summary.llm_by_purpose or {})}), {llm['llm_calls']:.0f} calls "
                  f"({llm['llm_cached_calls']:.0f} cached), {llm['llm_total_tokens']:.0f} tokens, "
                  f"${llm['llm_cost_usd']:.4f}", highlight=False)
    if (versus := actual_line(summary.llm_estimate, llm)) is not None:
        out.print(versus, markup=False, highlight=False)
    selection = summary.selection
    if selection is not None and not selection.separated:
        low, high = selection.ci95
        err.print(f"warning: selection set too small to separate the top trials: on its "
                  f"{selection.n_questions} questions winner #{selection.winner} minus runner-up "
                  f"#{selection.runner_up} is {selection.difference:+.4f}, 95% CI [{low:+.4f}, "
                  f"{high:+.4f}] spans 0; add questions before trusting the ranking", highlight=False)
    for line in held_out_lines(summary.held_out):
        out.print(line, markup=False, highlight=False)
    if summary.judge_agreement is not None:
        for line in summary.judge_agreement.lines():
            out.print(f"judge agreement: {line}", markup=False, highlight=False)
    found = f"--experiment {experiment}" if workdir is None else f"--storage {scrub_url(exp.storage_url)}"
    out.print(f"MLflow: {scrub_url(result.tracking_uri)} (composer ui --experiment {experiment}) · "
              f"export: composer export {result.name} {found} --out {_shown(exp.work_dir / 'best.yaml')}",
              markup=False, highlight=False)


def _with_ray(exp: ExperimentConfig, address: str | None, workers: int | None) -> ExperimentConfig:
    """The experiment with ``--ray`` and ``--workers`` over its ``executor:``."""
    from composer.study.experiment import ExecutorConfig, RayConfig

    current = exp.executor.ray if exp.executor is not None else None
    if address is None and workers is None:
        return exp
    if address is None and current is None:
        raise InputError("--workers runs the study's workers on Ray: give --ray ADDRESS too (local, auto or "
                         "ray://HOST:10001)", field="workers")
    ray = current or RayConfig()
    update: dict[str, object] = {}
    if address is not None:
        update["address"] = address
    if workers is not None:
        update["workers"] = workers
    return exp.model_copy(update={"executor": ExecutorConfig(ray=ray.model_copy(update=update))})


def _print_estimate(exp: ExperimentConfig, n_trials: int | None, study_name: str | None, strict: bool,
                    as_json: bool) -> None:
    """``--estimate``: the study's LLM cost as a table (or JSON), nothing run."""
    import json

    from composer.cluster.refusals import ray_config, shared_caches
    from composer.cost.render import render_estimate
    from composer.study.leaderboard import report_console
    from composer.study.study import estimate_study

    exp = shared_caches(exp, ray_config(exp))  # the caches the study's workers would read
    est = estimate_study(exp, n_trials=n_trials, study_name=study_name, strict=strict)
    if as_json:
        typer.echo(json.dumps(est.to_dict(), ensure_ascii=False, indent=2))
    else:
        report_console().print(render_estimate(est))


def _shown(path: Path) -> str:
    """``path`` relative to the current folder when it lies below it: the export lands in the work dir,
    where ``load_pipeline`` keeps its indexes by default, not in whatever folder the command ran from."""
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def failure_lines(causes: list[tuple[str, list[int]]], limit: int = 8) -> list[str]:
    """The study's failed trials by cause, so that a space whose hub models all failed to load says so."""
    if not causes:
        return []
    total = sum(len(numbers) for _, numbers in causes)
    lines = [f"{total} failed trial{'s' if total > 1 else ''} by cause:"]
    for cause, numbers in causes[:limit]:
        shown = ", ".join(f"#{n}" for n in numbers[:6]) + (", ..." if len(numbers) > 6 else "")
        lines.append(f"  {len(numbers)} x {cause} ({shown})")
    if len(causes) > limit:
        lines.append(f"  ... and {len(causes) - limit} more causes (composer trials, or --debug)")
    return lines


def held_out_lines(held: HeldOut | None) -> list[str]:
    """The held-out re-score as ``composer optimize`` prints it: the winner against the runner-up and the
    verdict on their difference (or the winner alone), and why a re-score failed."""
    if held is None:
        return []
    lines = []
    winner, runner_up, d = held.winner, held.runner_up, held.difference
    if winner is not None and runner_up is not None and d is not None:
        low, high = d.ci95
        lines.append(f"held-out ({held.n_questions} questions): winner #{winner.trial} "
                     f"{winner.held_out_composite:.4f} vs runner-up #{runner_up.trial} "
                     f"{runner_up.held_out_composite:.4f}; difference {d.mean:+.4f} "
                     f"95% CI [{low:+.4f}, {high:+.4f}] – really better: {d.verdict}")
    elif winner is not None:
        lines.append(f"held-out ({held.n_questions} questions): winner #{winner.trial} "
                     f"{winner.held_out_composite:.4f}")
    if held.error is not None:
        lines.append(f"held-out ({held.n_questions} questions): {held.error}")
    return lines
