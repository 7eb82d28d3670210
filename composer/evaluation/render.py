"""The terminal view of a report: one row per metric, one column per cutoff k, mean with its 95% CI."""

from __future__ import annotations

from rich.table import Table

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


def _cell(st: MetricStats | None) -> str:
    if st is None:
        return "–"
    return f"{st.mean:.3f}\n[dim]{st.ci_low:.3f}–{st.ci_high:.3f}[/dim]"


def _caption(report: EvaluationReport) -> str:
    parts = ["each cell: mean, then its 95% bootstrap CI"]
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
