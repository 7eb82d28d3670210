"""A study's trials ranked by the objective: the table `composer trials` prints and MLflow stores."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from composer.record import TrialRecord

if TYPE_CHECKING:
    import optuna
    import pandas as pd
    from rich.console import Console
    from rich.table import Table

STUDY_ATTR = "composer"
"""Study user attribute holding the study's provenance (data, fingerprints, cutoff); see study.py."""
WEIGHTS_ATTR = "objective_weights"
"""Study user attribute holding the objective's weights in force (metric key -> weight, summing to 1)."""
PIPED_WIDTH = 200
"""Columns of output that goes to a file or a pipe, where Rich would otherwise wrap at 80."""


COST_COLUMNS = ("latency_ms", "context_tokens", "llm_cost_usd")
"""What a trial costs, shown after the weighted metrics."""
SHARE_COLUMNS = ("judge_fallback",)
"""Shares of a trial's samples worth a look, shown after the costs when a trial has one: those its judge
failed on and a deterministic fallback scored (``composer.judges.panel.JUDGE_FALLBACK``)."""


def weighted_metrics(study: optuna.Study) -> list[str]:
    """The metrics carrying the study's objective weight, as it resolved them (the judged
    ``answer_correctness`` with a judge, its stand-in ``token_f1`` without); a study that recorded no
    weights, the default objective's at its cutoff."""
    weights = study.user_attrs.get(WEIGHTS_ATTR)
    if weights:
        return list(weights)
    k = int(study.user_attrs.get(STUDY_ATTR, {}).get("k_eval", 10))
    return [f"recall@{k}", f"ndcg@{k}", "token_f1", "faithfulness_overlap"]


def leaderboard(study: optuna.Study) -> pd.DataFrame:
    """One row per finished trial in ``rank_key``'s order: complete trials best first, then pruned, then
    failed, each failed one with its ``reason`` (a column only when a trial failed)."""
    import pandas as pd
    from optuna.trial import TrialState

    shown = [*weighted_metrics(study), *COST_COLUMNS, *SHARE_COLUMNS]
    dominated = dominated_trials(study)
    rows: list[tuple[tuple[float, ...], dict[str, Any]]] = []
    for t in study.get_trials(deepcopy=False):
        if t.state in (TrialState.RUNNING, TrialState.WAITING):
            continue
        record = TrialRecord.of(t)
        metrics: Mapping[str, float] = record.metrics if record is not None else {}
        row: dict[str, Any] = {"trial": t.number, "state": t.state.name,
                               "composite": metrics.get("composite")}
        for name in shown:
            row[name] = metrics.get(name)
        row["config"] = describe_params(t.params)
        row["duplicate_of"] = record.duplicate_of if record is not None else None
        row["index_key"] = record.index.key if record is not None and record.index is not None else None
        row["seconds"] = t.duration.total_seconds() if t.duration is not None else None
        row["reason"] = failure_reason(t)
        rows.append((rank_key(t.state.name, metrics, t.number, t.number in dominated), row))
    columns = ["trial", "state", "composite", *shown, "config", "duplicate_of", "index_key", "seconds",
               "reason"]
    frame = pd.DataFrame([row for _, row in sorted(rows, key=lambda pair: pair[0])], columns=columns)
    return frame.drop(columns=[c for c in (*SHARE_COLUMNS, "reason") if frame[c].isna().all()])


STATE_ORDER = {"COMPLETE": 0, "PRUNED": 1, "FAIL": 2}


def rank_key(
    state: str, metrics: Mapping[str, float], number: int, dominated: bool = False
) -> tuple[float, ...]:
    """The one order of a study's trials: complete, then pruned, then failed; the best composite first; an
    equal composite goes to a trial on the Pareto front of a multi-objective study (``dominated``: one with
    the same composite and a worse secondary objective, such as more context tokens, is not the best), then
    to the faster configuration (``latency_ms``), then the cheaper (``llm_cost_usd``; none is free), then
    the earlier trial. Without the tie-break, a tie went to the slowest."""
    composite = metrics.get("composite")
    return (
        STATE_ORDER.get(state, len(STATE_ORDER)),
        -float(composite) if composite is not None and composite == composite else math.inf,
        float(dominated),
        float(metrics.get("latency_ms", math.inf)),
        float(metrics.get("llm_cost_usd", 0.0)),
        number,
    )


def dominated_trials(study: optuna.Study) -> set[int]:
    """Numbers of the complete trials off the Pareto front of a multi-objective study (none otherwise)."""
    from optuna.trial import TrialState

    if len(study.directions) < 2:
        return set()
    front = {t.number for t in study.best_trials}
    return {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))} - front


def ranked_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """Complete trials best first (``rank_key``), one per distinct configuration (repeats left out).

    The composite decides in multi-objective studies too: among the trials of the highest composite, one
    at least lies on the Pareto front, and the tie-break puts those first.
    """
    from optuna.trial import TrialState

    seen: set[str] = set()
    out = []
    dominated = dominated_trials(study)
    scored = [(t, record) for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
              if (record := TrialRecord.of(t)) is not None and record.composite is not None]
    for t, record in sorted(scored, key=lambda pair: rank_key("COMPLETE", pair[1].metrics, pair[0].number,
                                                               pair[0].number in dominated)):
        if record.config_hash not in seen:
            seen.add(record.config_hash)
            out.append(t)
    return out


def failure_causes(trials: Sequence[optuna.trial.FrozenTrial]) -> list[tuple[str, list[int]]]:
    """Failed trials grouped by cause, most frequent first: the first line of the error, "invalid
    configuration" for sampled values that make none, "process died" for a trial whose worker was lost.
    Surplus trials (another worker took the last slot) are no failure of a pipeline and left out."""
    from composer.study.fate import failure_of

    causes: dict[str, list[int]] = {}
    for t in trials:
        cause = failure_reason(t)
        if cause is not None and failure_of(t) != "surplus":
            causes.setdefault(cause, []).append(t.number)
    return sorted(causes.items(), key=lambda item: (-len(item[1]), item[1][0]))


def failure_reason(trial: optuna.trial.FrozenTrial) -> str | None:
    """Why a trial failed, in a line: its error's first line, "invalid configuration: ..." for sampled
    values that make none, "process died" for a lost worker's; None for a trial that did not fail."""
    from composer.study.fate import failure_of

    kind = failure_of(trial)
    if kind is None:
        return None
    record = TrialRecord.of(trial)
    error = record.error if record is not None else None
    first = (error or "unknown error").strip().splitlines()[0][:300]
    return {"invalid": f"invalid configuration: {first}", "lost": "process died"}.get(kind, first)


def describe_params(params: Mapping[str, Any]) -> str:
    """Trial parameters short enough for a table cell: ``mode=bm25 chunking=paragraph k=5 rerank=mmr``."""
    return " ".join(f"{_short(key)}={value}" for key, value in params.items())


def _short(key: str) -> str:
    section, _, name = key.partition(".")
    if not name or name == "method":
        return section
    return name if section == "retrieval" else key


def report_console(*, stderr: bool = False) -> Console:
    """A console for the leaderboard and the study's lines: a terminal's own width, but ``PIPED_WIDTH``
    when piped (``make demo | tee log``), so each trial stays one readable line in the log; an explicit
    ``COLUMNS`` wins."""
    from composer.console import make_console

    console = make_console(stderr=stderr)
    if console.is_terminal or "COLUMNS" in os.environ:
        return console
    return make_console(stderr=stderr, width=PIPED_WIDTH)


def render_leaderboard(frame: pd.DataFrame, *, title: str = "", limit: int | None = None) -> Table:
    """The leaderboard as a Rich table; metric columns nobody scored are left out. Cells are ``Text``:
    a sampled value with brackets (a model name, a prompt) is not Rich markup."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title or None, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    shown = [c for c in frame.columns
             if c not in ("index_key", "duplicate_of", "seconds") and frame[c].notna().any()]
    for column in shown:
        left = column in ("state", "config", "reason")
        table.add_column(header(column), justify="left" if left else "right",
                         no_wrap=column not in ("config", "reason"), overflow="fold")
    for _, row in frame.head(limit).iterrows() if limit else frame.iterrows():
        cells = [_cell(row[c], c) for c in shown]
        if row["duplicate_of"] == row["duplicate_of"] and row["duplicate_of"] is not None:
            cells[shown.index("state")] = f"= #{int(row['duplicate_of'])}"
        table.add_row(*(Text(c) for c in cells))
    return table


REASON_CHARS = 120
"""A failure's reason as the table shows it (the CSV and the study's MLflow leaderboard keep 300)."""
_HEADERS = {"composite": "objective", "token_f1": "F1", "faithfulness_overlap": "faithful",
            "latency_ms": "ms/q", "context_tokens": "context tokens", "llm_cost_usd": "LLM $",
            "judge_fallback": "judge fallback"}
_STATES = {"COMPLETE": "done", "PRUNED": "pruned", "FAIL": "failed"}


def header(column: str) -> str:
    """A column's name in the tables: short for the stand-ins and costs, a metric's own otherwise."""
    return _HEADERS.get(column, column.replace("recall@", "R@"))


def _cell(value: Any, column: str) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    if column == "trial":
        return f"#{int(value)}"
    if column == "state":
        return _STATES.get(str(value), str(value))
    if column in ("latency_ms", "context_tokens"):
        return f"{value:.1f}" if column == "latency_ms" else f"{value:.0f}"
    if column == "llm_cost_usd":
        return f"{value:.4f}"
    if column in SHARE_COLUMNS:
        return f"{value:.0%}"
    if column == "reason" and len(str(value)) > REASON_CHARS:
        return f"{str(value)[:REASON_CHARS - 1]}…"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)
