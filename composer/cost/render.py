"""A cost estimate on the terminal: one row per stage, then the trial, the study and the configurations
at either end; and, after a study, the estimate beside what it spent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from composer.cost.estimate import ConfigCost, Estimate, config_label

if TYPE_CHECKING:
    from rich.console import RenderableType


def render_estimate(est: Estimate) -> RenderableType:
    """The estimate as a Rich table with its totals below."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"LLM cost estimate: study {est.study}", title_justify="left")
    for name in ("stage", "model", "calls/question", "questions", "in tokens/call", "out tokens/call",
                 "$ per trial"):
        table.add_column(name, justify="left" if name in ("stage", "model") else "right")
    for s in est.stages:
        table.add_row(s.stage, s.model, f"{s.calls_per_question:.2f}", str(s.questions),
                      f"{s.input_tokens:.0f}", f"{s.output_tokens:.0f}", _usd(s.usd_per_trial))
    lines = [
        f"per trial: {_usd(est.usd_per_trial)}{_time(est.seconds_per_trial)} (mean of {est.configurations} "
        "configurations)",
        f"study: {est.trials} trials to run ({est.finished} done), {est.held_out} held-out questions, "
        f"{est.preflight} test requests: {est.requests:,.0f} requests, {_usd(est.usd)}{_time(est.seconds)}"
        + (f"; {est.cached:,.0f} more already in the LLM cache" if est.cached else ""),
    ]
    lines += [f"{end}: {_config(c)}" for end, c in (("cheapest", est.cheapest), ("dearest", est.dearest))
              if c is not None]
    if not est.stages:
        lines.insert(0, "no configuration of the space calls an LLM: the study costs no LLM request")
    if est.unpriced:
        lines.append(f"no price for {', '.join(est.unpriced)}: give llm.price (USD per million tokens)")
    if est.untimed:
        lines.append(f"no time for {', '.join(est.untimed)}: its test request was not answered (or its key "
                     "is not set)")
    if est.seconds is not None:
        lines.append("time: each model's test-request latency x its requests / its max_concurrency (LLM "
                     "requests only; a long reply takes longer than the test's few tokens)")
    return Group(table, *(Text(line) for line in lines))


def actual_line(estimate: Mapping[str, float] | None, usage: Mapping[str, float] | None) -> str | None:
    """"LLM estimate vs actual: 130 vs 124 requests (actual -4.6%), $0.0123 vs $0.0119 (actual -3.3%)"."""
    if not estimate or not usage:
        return None
    parts = [f"{estimate['llm_requests']:,.0f} vs {usage.get('llm_requests', 0):,.0f} requests"
             f"{_off(estimate['llm_requests'], usage.get('llm_requests', 0))}"]
    if "llm_cost_usd" in estimate:
        parts.append(f"${estimate['llm_cost_usd']:.4f} vs ${usage.get('llm_cost_usd', 0):.4f}"
                     f"{_off(estimate['llm_cost_usd'], usage.get('llm_cost_usd', 0))}")
    return "LLM estimate vs actual: " + ", ".join(parts)


def _off(estimated: float, actual: float) -> str:
    return f" (actual {(actual - estimated) / estimated:+.1%})" if estimated else ""


def _config(c: ConfigCost) -> str:
    spent = f"{_usd(c.usd_per_trial)} and {c.requests_per_trial:,.0f} requests a trial"
    return f"{spent}: {config_label(c.params)}"


def _time(seconds: float | None) -> str:
    """", about 1 h 05 min" beside dollars; nothing when the estimate is untimed."""
    if seconds is None:
        return ""
    minutes = round(seconds / 60)
    if seconds < 60:
        return f", about {seconds:.0f} s"
    return f", about {minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f", about {minutes} min"


def _usd(value: float | None) -> str:
    return "unpriced" if value is None else f"${value:.4f}"
