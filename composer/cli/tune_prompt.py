"""`composer tune-prompt`: optimize a study winner's answer prompt with GEPA, kept only when the held-out
questions say it is better than its seed."""

from __future__ import annotations

from pathlib import Path

import typer

from composer.cli.options import ALLOW_ENV, EXPERIMENT, STORAGE, STUDY, flag


def tune_prompt_command(
    study: str | None = STUDY,
    experiment: Path | None = EXPERIMENT,
    storage: str | None = STORAGE,
    seed_prompt: str | None = typer.Option(
        None, "--seed-prompt", metavar="FILE|URI", help="Start from this prompt (a prompt file, or "
        "prompts:/NAME@ALIAS, prompts:/NAME/VERSION) instead of the winner's own."
    ),
    estimate: bool = flag("--estimate", "Send nothing: print the reflection and evaluation requests, "
                          "tokens and dollars the optimization would take at most."),
    as_json: bool = flag("--json", "Print the result (or, with --estimate, the estimate) as JSON."),
    allow_env: list[str] | None = ALLOW_ENV,
) -> None:
    """Optimize the study winner's answer prompt (GEPA, settings from the experiment's prompt_tuning:):
    candidates scored with the study's objective on its selection split, the best judged against its seed
    on the held-out split and registered as a new prompt version only when better. A rerun prints the
    stored result and sends nothing."""
    import json
    import os

    from composer.errors import ConfigError
    from composer.study import prompt_stage
    from composer.study.experiment import locate_study
    from composer.study.leaderboard import report_console

    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    name, url, exp = locate_study(study, experiment, storage)
    if exp is None:
        raise ConfigError("give --experiment EXPERIMENT.yaml: the optimization scores prompts with its data, "
                          "objective and llm: block", field="experiment")
    if storage is not None:
        exp = exp.model_copy(update={"storage": url})
    tuning = prompt_stage.prepare(exp, study_name=name, seed_prompt=seed_prompt)
    out, err = report_console(), report_console(stderr=True)
    done = prompt_stage.stored(tuning)
    if estimate or done is None:
        foreseen = prompt_stage.estimate(tuning)
        if estimate:
            if as_json:
                typer.echo(json.dumps(foreseen.to_dict(), ensure_ascii=False, indent=2))
            else:
                for line in foreseen.lines():
                    out.print(line, markup=False, highlight=False)
            return
        err.print(foreseen.lines()[-1].strip(), markup=False, highlight=False)
    result = done or prompt_stage.run(tuning)
    if as_json:
        typer.echo(json.dumps(result.to_dict(), ensure_ascii=False, indent=2))
        return
    if done is not None:
        err.print(f"study {name}: this optimization finished before; its stored result (nothing sent)",
                  markup=False, highlight=False)
    for line in prompt_stage.verdict_lines(result):
        out.print(line, markup=False, highlight=False)
