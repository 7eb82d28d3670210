"""`composer report`: one self-contained HTML page of a study, to read or send without an MLflow server."""

from __future__ import annotations

import base64
import html
import numbers
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from composer.cli.options import EXPERIMENT, STORAGE, STUDY

if TYPE_CHECKING:
    import optuna
    import pandas as pd
    from mlflow import MlflowClient

    from composer.study.experiment import ExperimentConfig

WORST = 10
"""How many of the winner's questions the page lists, worst first."""
TOP = 5
"""How many of the best trials the page gives confidence intervals for."""
DEFAULT_UI_URL = "http://127.0.0.1:5000"
"""Where ``composer ui`` serves a local store with its default ``--host`` and ``--port``."""


def report_command(
    study: str | None = STUDY,
    experiment: Path | None = EXPERIMENT,
    storage: str | None = STORAGE,
    out: Path | None = typer.Option(
        None, "--out", help="HTML file to write (default: <workdir>/<study>-report.html)."
    ),
    ui_url: str | None = typer.Option(
        None, "--ui-url", help="MLflow UI the page links runs to (default: the tracking server, else "
        f"where `composer ui` serves a local store: {DEFAULT_UI_URL})."
    ),
) -> None:
    """Write the study's held-out verdict, leaderboard (LLM cost, MLflow run links), confidence intervals,
    optimization history, parameter importances and the winner's worst questions as one HTML page (images
    inline, no scripts)."""
    from composer.errors import ConfigError
    from composer.files import write_atomic
    from composer.study.experiment import locate_study
    from composer.study.study import load_study

    name, url, exp = locate_study(study, experiment, storage)
    if exp is None:
        raise ConfigError("give --experiment EXPERIMENT.yaml: the page needs its objective and MLflow store",
                          field="experiment")
    page = render_report(load_study(name, url), exp, ui_url)
    target = out or exp.work_dir / f"{name}-report.html"
    write_atomic(target, page)
    typer.echo(f"report: {target}")


def render_report(study: optuna.Study, exp: ExperimentConfig, ui_url: str | None = None) -> str:
    """The page's HTML: every value escaped, the charts as inline PNG, MLflow runs linked in the UI at
    ``ui_url`` (see ``ui_base``)."""
    from composer.cli.report_prompt import prompt_section
    from composer.study import finish, plots
    from composer.study.leaderboard import WEIGHTS_ATTR, leaderboard

    base = ui_base(exp.tracking_uri, ui_url)
    board = leaderboard(study)
    trials = study.get_trials(deepcopy=False)
    charts = plots.plots(study, exp)
    best = None if board.empty or board.iloc[0]["state"] != "COMPLETE" else int(board.iloc[0]["trial"])
    weights = dict(study.user_attrs.get(WEIGHTS_ATTR, {}))
    runs = _mlflow_runs(exp, study.study_name, base)
    title = f"Composer study {study.study_name}"
    totals = finish.llm_totals(trials)
    parts = [
        f"<h1>{html.escape(title)}</h1>",
        f"<p>{html.escape(_headline(board, trials))}"
        + f". Objective weights: {html.escape(', '.join(f'{k} {w:.2f}' for k, w in weights.items()))}. "
        + html.escape(_cost_line(totals)) + "</p>",
        _mlflow_line(runs, exp),
        "<h2>Held-out verdict</h2>",
        _held_out_section(study.user_attrs.get("held_out"), split=exp.split is not None,
                          winner=best is not None),
        "<h2>Can the judge be trusted?</h2>",
        _judge_section(study.user_attrs.get("judge_agreement")),
        "<h2>Leaderboard</h2>",
        _leaderboard_table(board, _usage(trials), totals, runs),
        f"<h2>95% bootstrap confidence intervals (top {TOP})</h2>",
        _intervals_table(board, list(weights), runs),
    ]
    for key, heading in (("optimization_history", "Optimization history"),
                         ("param_importances", "Parameter importances"), ("pareto_front", "Pareto front")):
        if key in charts:
            data = base64.b64encode(charts[key]).decode("ascii")
            parts += [f"<h2>{heading}</h2>", f'<img alt="{heading}" src="data:image/png;base64,{data}">']
        elif key == "param_importances" and charts and (note := plots.importances_note(study)) is not None:
            parts += [f"<h2>{heading}</h2>", f"<p>{html.escape(note.capitalize())}.</p>"]
    if (tuned := prompt_section(study)) is not None:
        parts.append(tuned)
    by_turn = None if best is None or runs is None else _by_turn_section(runs, best, list(weights))
    if by_turn is not None:
        parts += ["<h2>The winner's scores by turn</h2>", by_turn]
    parts.append(f"<h2>The winner's {WORST} worst questions</h2>")
    worst = None if best is None or runs is None else _worst_questions(runs, best, list(weights))
    parts.append(
        _table(list(worst.columns), worst.itertuples(index=False), digits=3)
        if worst is not None
        else "<p>No per-question table in MLflow for the winner (its run is not written, or older).</p>"
    )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
        + "\n".join(parts)
        + "</body></html>\n"
    )


def _headline(board: pd.DataFrame, trials: Sequence[optuna.trial.FrozenTrial]) -> str:
    """What became of the study's trials and its winner; with none complete, the commonest failure."""
    from composer.study.leaderboard import failure_causes

    states = board["state"].value_counts()
    counts = ", ".join(f"{states.get(state, 0)} {word}" for state, word in
                       (("COMPLETE", "complete"), ("PRUNED", "pruned"), ("FAIL", "failed")))
    line = f"{len(board)} finished trials ({counts})"
    if not board.empty and board.iloc[0]["state"] == "COMPLETE":
        return f"{line}; best: trial #{int(board.iloc[0]['trial'])}, composite " \
               f"{float(board.iloc[0]['composite']):.4f}"
    if len(board) and states.get("FAIL", 0) == len(board):
        line = "its 1 trial failed" if len(board) == 1 else f"all {len(board)} trials failed"
    causes = failure_causes(trials)
    if not causes:
        return f"{line}; no trial completed, so there is no winner"
    cause, numbers = causes[0]
    return (f"{line}; no trial completed, so there is no winner. The commonest failure ({len(numbers)} of "
            f"{sum(len(n) for _, n in causes)}): {cause}")


def ui_base(tracking_uri: str, given: str | None) -> str:
    """Where the page's run links point: ``given`` (``--ui-url``), else the tracking server itself (its
    credentials left out), else what ``composer ui`` serves a local store at with its defaults."""
    from composer.errors import ConfigError

    if given is not None:
        parts = urllib.parse.urlsplit(given)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"not an http(s) URL: {given!r} (e.g. {DEFAULT_UI_URL})", field="--ui-url")
        return given.rstrip("/")
    if tracking_uri.startswith(("http://", "https://")):
        parts = urllib.parse.urlsplit(tracking_uri)
        host = parts.netloc.rpartition("@")[2]
        return urllib.parse.urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))
    return DEFAULT_UI_URL


@dataclass(frozen=True)
class Link:
    """A table cell that links: its text and address are escaped like any other cell's."""

    href: str
    text: str


@dataclass(frozen=True)
class StudyRuns:
    """The study's runs in its MLflow store, and where the UI shows them."""

    client: MlflowClient
    base: str
    experiment_id: str
    parent: str | None
    trials: dict[int, str]
    """Trial number -> run id."""

    def link(self, run_id: str, text: str) -> Link:
        quote = urllib.parse.quote
        return Link(f"{self.base}/#/experiments/{quote(self.experiment_id)}/runs/{quote(run_id)}", text)


def _mlflow_runs(exp: ExperimentConfig, study: str, base: str) -> StudyRuns | None:
    """The study's parent run and its trial runs (a trial's newest run if it has several), as the MLflow
    writer finds them; None when the store holds none of them yet."""
    from mlflow import MlflowClient

    from composer.store import sqlite_file
    from composer.tracking.read import study_runs

    file = sqlite_file(exp.tracking_uri)
    if file is not None and not file.exists():
        return None
    client = MlflowClient(exp.tracking_uri)
    found = client.get_experiment_by_name(exp.mlflow_experiment)
    if found is None:
        return None
    parent, trials = study_runs(client, str(found.experiment_id), study)
    return StudyRuns(client, base, str(found.experiment_id), parent, trials)


def _mlflow_line(runs: StudyRuns | None, exp: ExperimentConfig) -> str:
    from composer.cli.ui import runs_url
    from composer.redact import scrub_url

    store = html.escape(scrub_url(exp.tracking_uri))
    if runs is None:
        return f"<p>MLflow: no runs of this study in {store}.</p>"
    every = Link(runs_url(runs.base, runs.experiment_id), "every run of the experiment")
    study = [] if runs.parent is None else [runs.link(runs.parent, "the study's run")]
    shown = ", ".join(_cell(link, 4) for link in (*study, every))
    return (f"<p>MLflow ({store}): {shown}; each trial's run is linked in the leaderboard. The links open "
            f"the MLflow UI at {html.escape(runs.base)} (<code>composer ui</code>; another address: "
            "<code>--ui-url</code>).</p>")


def _cost_line(llm: dict[str, float]) -> str:
    if not llm:
        return "LLM cost: no LLM calls."
    return (f"LLM cost: ${llm.get('llm_cost_usd', 0.0):.4f} over all trials ({llm.get('llm_calls', 0.0):.0f} "
            f"calls, {llm.get('llm_cached_calls', 0.0):.0f} from the cache).")


LLM_COLUMNS = {"llm_cost_usd": "LLM cost (USD)", "llm_prompt_tokens": "LLM input tokens",
               "llm_completion_tokens": "LLM output tokens"}
"""The leaderboard's LLM columns: what each trial's own calls cost and sent (pruned and failed trials'
too), apart from ``context_tokens``, the retrieved text each question puts before the generator."""


def _usage(trials: list[optuna.trial.FrozenTrial]) -> dict[int, dict[str, float]]:
    """Each trial's own LLM usage (trials that called no LLM are left out)."""
    from composer.record import TrialRecord

    return {t.number: dict(record.llm_usage) for t in trials
            if (record := TrialRecord.of(t)) is not None and record.llm_usage}


def _held_out_section(stored: Any, *, split: bool, winner: bool) -> str:
    """The held-out re-score of the winner and the runner-up and the verdict on their difference, as
    ``composer optimize`` prints it; what is missing is said, and why, not left blank. ``stored``: the
    study's ``held_out`` user attribute; ``split``: whether the experiment holds questions out;
    ``winner``: whether a trial completed."""
    from composer.summary import HeldOut

    held = HeldOut.from_dict(stored)
    if held is None and not winner:
        return "<p>No held-out re-score: no trial completed, so there is no winner to re-score.</p>"
    if held is None and split:
        return ("<p>No held-out re-score yet: the study re-scores its winner on the held-out questions when "
                "its trials are done, and it was stopped before.</p>")
    if held is None:
        return ("<p>No held-out re-score: the experiment has no <code>split:</code>, so the winner was only "
                "scored on the questions that chose it.</p>")
    parts = [f"<p>{held.n_questions} held-out questions.</p>"]
    roles = {"winner": held.winner, "runner-up": held.runner_up}
    rows = [[role, f"#{c.trial}", c.selection_composite, c.held_out_composite]
            for role, c in roles.items() if c is not None]
    if rows:
        parts.append(_table(["", "trial", "selection composite", "held-out composite"], rows))
    d = held.difference
    if d is not None:
        low, high = d.ci95
        parts.append(f"<p>Winner minus runner-up: {d.mean:+.4f}, 95% CI [{low:+.4f}, {high:+.4f}] over "
                     f"{d.n_paired} paired questions. Winner really better: "
                     f"<strong>{html.escape(d.verdict)}</strong>.</p>")
    if held.error:
        parts.append(f"<p>{html.escape(held.error)}</p>")
    return "\n".join(parts)


def _judge_section(stored: Any) -> str:
    """The judge's agreement with human labels per judged metric, and the warning when it is unchecked or
    low (``stored``: the study's ``judge_agreement`` user attribute)."""
    from composer.summary import JudgeAgreement

    agreement = JudgeAgreement.from_dict(stored)
    if agreement is None:
        return "<p>No LLM judge: every metric was computed without one.</p>"
    items = "".join(f"<li>{html.escape(line)}</li>" for line in agreement.lines())
    parts = [f"<p>Judge <code>{html.escape(agreement.judge_model)}</code>, its agreement with human labels "
             f"(Cohen's kappa; warned below {agreement.min_kappa:g}):</p><ul>{items}</ul>"]
    warning = agreement.warning()
    if warning is not None:
        parts.append(f"<p><strong>Warning:</strong> {html.escape(warning)}</p>")
    return "\n".join(parts)


def _leaderboard_table(
    board: pd.DataFrame, usage: dict[int, dict[str, float]], totals: dict[str, float], runs: StudyRuns | None
) -> str:
    """The leaderboard, each trial linked to its MLflow run, with its LLM cost and tokens, and a last row
    of the study's totals (every trial's, as the cost line above)."""
    columns = [c for c in board.columns if c not in ("index_key", "llm_cost_usd")]
    rows = []
    for row in board[columns].itertuples(index=False):
        cells: list[Any] = list(row)
        number = int(cells[0])
        if runs is not None and number in runs.trials:
            cells[0] = runs.link(runs.trials[number], str(number))
        duplicate = cells[columns.index("duplicate_of")]
        cells[columns.index("duplicate_of")] = None if _blank(duplicate) else f"#{int(duplicate)}"
        rows.append([*cells, *_llm_cells(usage.get(number))])
    if totals:
        rows.append(["total", *([None] * (len(columns) - 1)), *_llm_cells(totals)])
    headers = ["context tokens" if column == "context_tokens" else column for column in columns]
    return _table([*headers, *LLM_COLUMNS.values()], rows)


def _llm_cells(usage: dict[str, float] | None) -> list[str | None]:
    """A row's LLM cells: the cost to the micro-dollar, the tokens whole; blank without LLM calls."""
    if usage is None:
        return [None] * len(LLM_COLUMNS)
    return [f"{usage.get(key, 0.0):.6f}" if key == "llm_cost_usd" else f"{usage.get(key, 0.0):.0f}"
            for key in LLM_COLUMNS]


def _intervals_table(board: pd.DataFrame, metrics: list[str], runs: StudyRuns | None) -> str:
    """Mean and 95% bootstrap CI of the objective's metrics for the best ``TOP`` complete trials (a repeat
    of an earlier configuration, answered from it, is not one), from the ``summary.json`` of their MLflow
    runs."""
    ran = board[(board["state"] == "COMPLETE") & board["duplicate_of"].isna()]
    top = [int(n) for n in ran["trial"].head(TOP)]
    rows = []
    for number in top:
        run_id = None if runs is None else runs.trials.get(number)
        summary = None if runs is None or run_id is None else _run_summary(runs.client, run_id)
        if runs is None or run_id is None or summary is None:
            continue
        means, cis = summary.get("metrics") or {}, summary.get("ci") or {}
        rows.append([runs.link(run_id, str(number)), *(_interval(means.get(m), cis.get(m)) for m in metrics)])
    if not rows:
        return "<p>No trial summaries in MLflow to read intervals from.</p>"
    return _table(["trial", *metrics], rows)


def _by_turn_section(runs: StudyRuns, number: int, metrics: list[str]) -> str | None:
    """The winner's objective metrics by turn (first turns, follow-ups, each position, per conversation)
    with their intervals over conversations, from its run's ``summary.json``; None for a question set
    without conversations."""
    run_id = runs.trials.get(number)
    summary = None if run_id is None else _run_summary(runs.client, run_id)
    found = (summary or {}).get("conversations")
    if not isinstance(found, dict) or not found.get("metrics"):
        return None
    means, cis = found["metrics"], found.get("ci") or {}
    views: dict[str, dict[str, str | None]] = {}
    for name in means:
        metric, _, view = name.rpartition(".")
        if metric in metrics or metric.startswith("all_found@"):
            views.setdefault(view, {})[metric] = _interval(means[name], cis.get(name))
    columns = sorted({m for row in views.values() for m in row})
    note = (f"<p>{found.get('n_conversations')} conversations, {found.get('n_follow_ups')} follow-ups; each "
            "interval resamples whole conversations.</p>")
    return note + _table(["turns", *columns], ([view, *(row.get(m) for m in columns)]
                                               for view, row in views.items()))


def _interval(mean: Any, ci: Any) -> str | None:
    if mean is None:
        return None
    if not isinstance(ci, list) or len(ci) != 2 or None in ci:
        return f"{mean:.4f}"
    return f"{mean:.4f} [{ci[0]:.4f}, {ci[1]:.4f}]"


def _run_summary(client: MlflowClient, run_id: str) -> dict[str, Any] | None:
    """A trial run's ``summary.json`` (its report's means and CIs), None if it has none."""
    import json
    import tempfile

    from mlflow.exceptions import MlflowException

    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = Path(client.download_artifacts(run_id, "summary.json", tmp))
            found = json.loads(path.read_text(encoding="utf-8"))
        except (MlflowException, OSError, ValueError):  # a failed trial's run, or one written before
            return None
    return found if isinstance(found, dict) else None


def _worst_questions(runs: StudyRuns, number: int, metrics: list[str]) -> pd.DataFrame | None:
    """The winner's per-question table from MLflow, worst first, cut to the objective's metrics."""
    from mlflow.exceptions import MlflowException

    from composer.tracking.read import read_question_table

    run_id = runs.trials.get(number)
    if run_id is None:
        return None
    try:
        table = read_question_table(runs.client, run_id)
    except (MlflowException, OSError):  # a run written before trials had their table
        return None
    shown = [c for c in ("question", "expected_ids", "retrieved_ids", "answer", "expected_response")
             if c in table.columns]
    table = table[shown + [m for m in metrics if m in table.columns]].head(WORST).copy()
    if "retrieved_ids" in table.columns:
        table["retrieved_ids"] = [_ids(v) for v in table["retrieved_ids"]]
    if "expected_ids" in table.columns:
        table["expected_ids"] = [_ids(v) for v in table["expected_ids"]]
    return table


def _ids(value: Any) -> str:
    return ", ".join(str(v) for v in list(value)[:5]) if value is not None else ""


def _table(columns: Sequence[str], rows: Iterable[Sequence[Any]], digits: int = 4) -> str:
    """An HTML table whose every header and cell is escaped (see ``_cell``)."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_cell(v, digits)}</td>" for v in row) + "</tr>\n" for row in rows)
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody></table>"


def _cell(value: Any, digits: int) -> str:
    """A cell's HTML: text escaped, a ``Link`` as an anchor (address and text escaped), a number with
    ``digits`` decimals, a missing value blank."""
    if isinstance(value, Link):
        return f'<a href="{html.escape(value.href, quote=True)}">{html.escape(value.text)}</a>'
    if _blank(value):
        return ""
    if isinstance(value, numbers.Real) and not isinstance(value, bool | numbers.Integral):
        return f"{float(value):.{digits}f}"
    return html.escape(str(value))


def _blank(value: Any) -> bool:
    import pandas as pd

    return value is None or (not isinstance(value, str | Link | list | tuple) and bool(pd.isna(value)))


STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}"
    "table{border-collapse:collapse;font-size:13px}th,td{padding:4px 8px;border-bottom:1px solid #ddd;"
    "text-align:start;vertical-align:top}th{background:#f4f4f4}img{max-width:100%}"
    "td{unicode-bidi:plaintext}"
)
