"""The terminal view of a report: one row per metric, one column per cutoff k, mean with its 95% CI; for a
conversational set, a second table of the scores by turn."""

from __future__ import annotations

from rich.table import Table

from composer.evaluation.breakdowns import split_name
from composer.evaluation.report import EvaluationReport, MetricStats


def render_report(report: EvaluationReport) -> Table:
    """A Rich table of the report's metrics; metrics without a cutoff (answer metrics) follow the grid."""
    stats = report.stats()
    table = Table(
        title=f"{len(report)} questions · match: {report.match_mode}",
        caption=_caption(report),
        title_justify="left",
        caption_justify="left",
    )
    table.add_column("metric", style="bold")
    columns = [f"@{k}" for k in report.ks] or ["value"]
    for column in columns:
        table.add_column(column, justify="right")

    grid: dict[str, dict[int, MetricStats]] = {}
    flat: dict[str, MetricStats] = {}
    for name, st in stats.items():
        base, at, k = name.partition("@")
        if at and k.isdigit():
            grid.setdefault(base, {})[int(k)] = st
        else:
            flat[name] = st
    for base, by_k in grid.items():
        table.add_row(base, *(_cell(by_k.get(k)) for k in report.ks))
    if flat:
        table.add_section()
        blanks = [""] * (len(columns) - 1)
        for name, st in flat.items():
            table.add_row(name, _cell(st), *blanks)
    return table


def render_breakdowns(report: EvaluationReport) -> Table | None:
    """A Rich table of a conversational set's scores by turn: one row per metric, one column per view
    (first turns, follow-ups, each turn position, per conversation); None for a set of lone questions."""
    breakdowns = report.breakdowns()
    if not breakdowns:
        return None
    grid: dict[str, dict[str, MetricStats]] = {}
    for name, st in breakdowns.items():
        metric, view = split_name(name)
        grid.setdefault(metric, {})[view] = st
    views = list(dict.fromkeys(split_name(name)[1] for name in breakdowns))  # turns first, conversation last
    talk = report.table
    assert talk.conversations is not None and talk.follow_ups is not None  # breakdowns need them
    table = Table(
        title=f"by turn · {len(set(talk.conversations))} conversations, {sum(talk.follow_ups)} follow-ups",
        caption="each cell: mean, then its 95% CI over conversations (each resampled whole); turn_5_plus: "
        "turns 5 and later; conversation: each conversation's mean, and all_found@k the share of "
        "conversations every labelled turn of which had a relevant hit in the top k",
        title_justify="left",
        caption_justify="left",
    )
    table.add_column("metric", style="bold")
    for view in views:
        table.add_column(view, justify="right")
    for metric, by_view in grid.items():
        table.add_row(metric, *(_cell(by_view.get(view)) for view in views))
    return table


def _cell(st: MetricStats | None) -> str:
    if st is None:
        return "–"
    return f"{st.mean:.3f}\n[dim]{st.ci_low:.3f}–{st.ci_high:.3f}[/dim]"


def _caption(report: EvaluationReport) -> str:
    over = " over conversations (each resampled whole)" if report.table.conversations is not None else ""
    parts = ["each cell: mean, then its 95% bootstrap CI" + over]
    skipped = report.skip_counts()
    if skipped:
        parts.append("skipped: " + ", ".join(f"{reason} {n}" for reason, n in sorted(skipped.items())))
    n_errors = sum(sum(kinds.values()) for kinds in report.error_counts().values())
    if n_errors:
        parts.append(f"errors: {n_errors}")
    for key in ("questions_missing_from_run", "run_questions_ignored"):
        if report.meta.get(key):
            parts.append(f"{key.replace('_', ' ')}: {report.meta[key]}")
    return " · ".join(parts)
