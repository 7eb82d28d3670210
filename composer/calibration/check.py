"""``composer judges check``: judge human-labelled answers and measure how well the judge agrees.

Each labelled answer is judged exactly as a study judges (the same judges, prompts and LLM reply cache:
a rerun sends nothing), its score turned into a verdict on the label's scale (pass when the score is at
least ``threshold``; a 1-5 rating as 1 + 4 x score, rounded), and the verdicts compared with the labels
per metric, per language and per answer-length tercile (a judge that likes long answers shows there).
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from composer.data.types import Question
from composer.errors import InputError, config_error
from composer.files import write_atomic
from composer.judges.agreement import bootstrap_agreement, confusion, kappa_of, spearman, terciles
from composer.judges.config import JudgeConfig
from composer.judges.labels import Label, Scale, check_passages, csv_cell, scale_of
from composer.judges.trust import distrust, judge_key, parsed_calls, store_checks
from composer.llm.config import LLMConfig
from composer.llm.sync import run_sync
from composer.llm.usage import Usage, track_usage
from composer.text import detect_language

if TYPE_CHECKING:
    from rich.console import RenderableType

    from composer.evaluation.judging import Judging
    from composer.judges.base import LLMJudge, Verdict

DEFAULT_THRESHOLD = 0.5
"""A judged score at least this high is a pass, for pass/fail labels."""
CATEGORIES: dict[Scale, tuple[int, ...]] = {"binary": (0, 1), "ordinal": (1, 2, 3, 4, 5)}
TERCILES = ("short", "medium", "long")


@dataclass(frozen=True)
class Judged:
    """One labelled answer with the judge's verdict (None: left out of the agreement, ``left_out`` says
    why in a few words that group such labels, ``reason`` in full)."""

    label: Label
    verdict: int | None
    score: float | None
    reason: str
    lang: str
    length: int = 0
    left_out: str = ""


@dataclass(frozen=True)
class Agreement:
    """Agreement of one group of answers: accuracy, kappa (quadratic-weighted for ratings), Spearman,
    their bootstrap CIs and the confusion matrix (rows: labels, columns: verdicts)."""

    n: int
    accuracy: float
    kappa: float
    spearman: float
    ci: Mapping[str, tuple[float, float]]
    confusion: list[list[int]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "accuracy": _num(self.accuracy),
            "kappa": _num(self.kappa),
            "spearman": _num(self.spearman),
            "ci": {k: [_num(lo), _num(hi)] for k, (lo, hi) in self.ci.items()},
            "confusion": self.confusion,
        }


@dataclass
class MetricCheck:
    """One metric's check: overall, by language, by answer-length tercile, and the worst disagreements."""

    metric: str
    scale: Scale
    key: str
    overall: Agreement
    by_language: dict[str, Agreement]
    by_length: dict[str, Agreement]
    judged: list[Judged]
    worst: list[Judged]
    parsed: tuple[int, int] = (0, 0)
    """(judge calls whose reply could be read, judge calls that got a reply)."""

    @property
    def unscored(self) -> int:
        return sum(1 for j in self.judged if j.verdict is None)

    def left_out(self) -> dict[str, list[Judged]]:
        """The labels left out of the agreement, by why (most first)."""
        groups: dict[str, list[Judged]] = {}
        for j in self.judged:
            if j.verdict is None:
                groups.setdefault(j.left_out, []).append(j)
        return dict(sorted(groups.items(), key=lambda item: -len(item[1])))

    @property
    def untrusted(self) -> str | None:
        """Why this check cannot vouch for the judge (``trust.distrust``), None when it can."""
        return distrust(len(self.judged), self.unscored)

    def lines(self) -> list[str]:
        """What the table's n hides: the labels used, those left out by why (with the first of each),
        the share of replies read, and whether the agreement may be read as trust."""
        used = len(self.judged) - self.unscored
        head = f"{self.metric}: {used} of {len(self.judged)} labels used"
        groups = [f"{len(js)} {why} (first: {js[0].label.id}: {_short(js[0].reason, 80)})"
                  for why, js in self.left_out().items()]
        out = [head + (f"; left out: {'; '.join(groups)}" if groups else "")]
        parsed, replies = self.parsed
        share = f"{parsed / replies:.0%}" if replies else "no reply"
        out.append(f"{self.metric}: judge replies read: {parsed} of {replies} calls ({share})")
        if self.untrusted is not None:
            out.append(f"{self.metric}: NOT TRUSTED: {self.untrusted}")
        return out

    def to_dict(self) -> dict[str, Any]:
        parsed, replies = self.parsed
        return {
            "metric": self.metric,
            "scale": self.scale,
            "categories": list(CATEGORIES[self.scale]),
            "judge_key": self.key,
            **self.overall.to_dict(),
            "labels_total": len(self.judged),
            "unscored": self.unscored,
            "left_out": {why: {"count": len(js), "ids": [j.label.id for j in js]}
                         for why, js in self.left_out().items()},
            "replies_read": parsed, "replies": replies,
            "trusted": self.untrusted is None, "untrusted": self.untrusted,
            "by_language": {k: v.to_dict() for k, v in self.by_language.items()},
            "by_length": {k: v.to_dict() for k, v in self.by_length.items()},
            "worst": [_row(j) for j in self.worst],
        }


@dataclass
class CheckResult:
    """A judge checked against labels: per metric agreement, and what the judging cost."""

    judge_model: str
    labels: str
    metrics: dict[str, MetricCheck]
    usage: dict[str, Any] = field(default_factory=dict)
    created: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {
            "judge": self.judge_model,
            "labels": self.labels,
            "created": self.created,
            "metrics": {m: c.to_dict() for m, c in self.metrics.items()},
            "usage": self.usage,
        }

    @property
    def trusted(self) -> bool:
        """Whether every metric's check can vouch for the judge (``judges check`` exits 1 otherwise)."""
        return all(c.untrusted is None for c in self.metrics.values())

    def records(self) -> dict[str, dict[str, Any]]:
        """What ``composer.judges.trust`` stores per judge key: the headline figures, not the answers."""
        out: dict[str, dict[str, Any]] = {}
        for check in self.metrics.values():
            summary = check.to_dict()
            out[check.key] = {
                "judge": self.judge_model,
                "metric": check.metric,
                "scale": check.scale,
                "labels": self.labels,
                "created": self.created,
                **{k: summary[k] for k in ("n", "accuracy", "kappa", "spearman", "ci", "labels_total",
                                           "trusted", "untrusted")},
            }
        return out

    def save(self, out: str | Path) -> None:
        """check.json (every figure) and judged.csv (every labelled answer with the judge's verdict)."""
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / "check.json", json.dumps(self.to_dict(), ensure_ascii=False, indent=2) + "\n")
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(_row(next(iter(self._all()), None)).keys()))
        writer.writeheader()
        for judged in self._all():
            writer.writerow({k: csv_cell(v) for k, v in _row(judged).items()})
        write_atomic(folder / "judged.csv", buffer.getvalue())

    def _all(self) -> list[Judged]:
        return [j for c in self.metrics.values() for j in c.judged]

    def render(self) -> RenderableType:
        """A Rich table: one row per metric, language and length tercile; then the worst disagreements."""
        from rich.console import Group
        from rich.table import Table

        table = Table(title=f"Judge {self.judge_model} against {self.labels}")
        for name in ("metric", "group", "n", "accuracy", "kappa [95% CI]", "spearman"):
            table.add_column(name, justify="left" if name in ("metric", "group") else "right")
        for check in self.metrics.values():
            kind = "weighted kappa" if check.scale == "ordinal" else "kappa"
            kind += ", NOT TRUSTED" if check.untrusted is not None else ""
            groups = [
                (f"all ({kind})", check.overall),
                *((f"lang {k}", v) for k, v in check.by_language.items()),
                *((f"length {k}", v) for k, v in check.by_length.items()),
            ]
            for i, (group, a) in enumerate(groups):
                low, high = a.ci["kappa"]
                table.add_row(
                    check.metric if i == 0 else "",
                    group,
                    str(a.n),
                    figure(a.accuracy),
                    f"{figure(a.kappa)} [{figure(low)}, {figure(high)}]",
                    figure(a.spearman),
                )
        worst = Table(title="Worst disagreements")
        for name in ("metric", "id", "label", "judge", "answer", "judge's reason"):
            worst.add_column(name, overflow="fold")
        for check in self.metrics.values():
            for j in check.worst:
                worst.add_row(
                    check.metric,
                    j.label.id,
                    str(j.label.label),
                    str(j.verdict),
                    _short(j.label.answer),
                    _short(j.reason),
                )
        return Group(table, worst) if worst.row_count else table


def check(
    labels: Sequence[Label],
    judge: JudgeConfig,
    *,
    llm: LLMConfig | None = None,
    workdir: str | Path = ".composer",
    threshold: float = DEFAULT_THRESHOLD,
    worst: int = 5,
    source: str | None = None,
    store: bool = True,
) -> CheckResult:
    """Judge every labelled answer with ``judge`` (over the generator settings ``llm``) and measure
    agreement per metric in ``judge.metrics`` that has labels (labels of a metric judged against passages
    need their passages: ``check_passages``). Only the judge's own verdicts count: the others are left
    out, by why (``MetricCheck.left_out``), and most of them left out makes the check refuse to vouch for
    the judge (``CheckResult.trusted``). The result is stored for ``latest_check`` unless ``store`` is
    false."""
    from composer.evaluation.judging import make_judging

    if not 0 < threshold <= 1:
        raise InputError(f"threshold must be in (0, 1], got {threshold}", field="threshold")
    metrics = [m for m in judge.metrics if any(lb.metric == m for lb in labels)]
    if not metrics:
        have = sorted({lb.metric for lb in labels}) or ["none"]
        raise InputError(
            f"no labels for the judged metrics {', '.join(judge.metrics)} (labels are for {', '.join(have)})",
            field="metrics",
        )
    check_passages([lb for lb in labels if lb.metric in metrics])
    config = judge.model_copy(update={"metrics": tuple(metrics), "max_failure_share": 1.0})
    judging = make_judging(config, llm, Path(workdir))
    with track_usage() as usage:
        checks = {
            m: _check_metric(judging, [lb for lb in labels if lb.metric == m], m, threshold, worst)
            for m in metrics
        }
    result = CheckResult(judging.model, source or (labels[0].source if labels else "<labels>"), checks,
                         usage.to_dict())
    if store:
        store_checks(workdir, result.records())
    return result


def _check_metric(
    judging: Judging, labels: list[Label], metric: str, threshold: float, worst: int
) -> MetricCheck:
    scale = scale_of(labels, metric)
    judged: list[Judged] = []
    calls = Usage()
    for lb, (outcome, used) in zip(labels, _judge_labels(judging.judges[metric], labels), strict=True):
        calls.calls += used.calls
        calls.failed_calls.update(used.failed_calls)
        lang, length = detect_language(lb.question), len(lb.answer.split())
        score, reason = outcome.score.score, outcome.score.reason
        why = _left_out(outcome, used)
        if why:  # a fallback's or a rule's score is not the judge's verdict
            judged.append(Judged(lb, None, None, reason, lang, length, why))
            continue
        rating = outcome.details.get("rating")
        judged.append(Judged(lb, verdict(score, scale, threshold, rating), score, reason, lang, length))
    cats = CATEGORIES[scale]
    scored = [j for j in judged if j.verdict is not None]
    lengths = terciles([j.length for j in scored])
    by_language = {
        lang: agreement([j for j in scored if j.lang == lang], cats)
        for lang in sorted({j.lang for j in scored})
    }
    by_length = {
        TERCILES[t]: agreement([j for j, k in zip(scored, lengths, strict=True) if k == t], cats)
        for t in sorted(set(lengths))
    }
    span = cats[-1] - cats[0]
    ranked = sorted(
        (j for j in scored if j.verdict != j.label.label),
        key=lambda j: -abs(j.label.label - (j.verdict or 0)) / span,
    )
    key = judge_key(judging.client.config, judging.settings, metric)
    return MetricCheck(metric, scale, key, agreement(scored, cats), by_language, by_length, judged,
                       ranked[:worst], parsed_calls(calls))


def _judge_labels(judge: LLMJudge, labels: Sequence[Label]) -> list[tuple[Verdict, Usage]]:
    """Each label's answer judged as a study judges it (``LLMJudge.ajudge``, all at once), with the
    calls it took: a verdict reached without one came from a rule, not from the judge."""

    async def one(lb: Label) -> tuple[Verdict, Usage]:
        question = Question(lb.id, lb.question, reference_answer=lb.reference_answer)
        with track_usage() as used:  # a task's own scope: its calls only
            outcome = await judge.ajudge(question, lb.answer, lb.contexts, None)
        return outcome, used

    async def every() -> list[tuple[Verdict, Usage]]:
        return list(await asyncio.gather(*(one(lb) for lb in labels)))

    return run_sync(every())


def _left_out(outcome: Verdict, used: Usage) -> str:
    """Why a judged label cannot count towards the judge's agreement, in words that group such labels
    ("" when it counts): the judge failed (its fallback's score is no verdict), no call was made (a rule
    scored it), or it was left unscored."""
    if outcome.failed:
        kinds = ", ".join(kind for kind, _ in used.failed_calls.most_common()) or "other"
        return f"the judge failed ({kinds})"
    if outcome.score.score is None:
        return f"not scored ({outcome.score.reason})"
    if used.calls == 0:
        return f"scored by a rule without asking the judge ({outcome.score.reason})"
    return ""


def verdict(score: float | None, scale: Scale, threshold: float, rating: float | None = None) -> int | None:
    """A judged score on the label's scale: pass/fail by ``threshold``; a rating as the judge's own 1-5
    rating when it gave one, else 1 + 4 x score, rounded half up."""
    if score is None:
        return None
    if scale == "binary":
        return int(score >= threshold)
    value = rating if rating is not None else 1 + 4 * score
    return max(1, min(5, int(value + 0.5)))


def agreement(judged: Sequence[Judged], categories: Sequence[int]) -> Agreement:
    """The agreement of a group of judged answers (NaN figures for an empty group)."""
    labels = [j.label.label for j in judged]
    verdicts = [j.verdict for j in judged if j.verdict is not None]
    quadratic = len(categories) > 2
    if not labels:
        nan = float("nan")
        return Agreement(
            0,
            nan,
            nan,
            nan,
            {"accuracy": (nan, nan), "kappa": (nan, nan), "spearman": (nan, nan)},
            [[0] * len(categories) for _ in categories],
        )
    matrix = confusion(labels, verdicts, categories)
    counts = matrix.astype(float)
    return Agreement(
        n=len(labels),
        accuracy=float(counts.trace() / counts.sum()),
        kappa=kappa_of(counts, quadratic=quadratic),
        spearman=spearman(labels, verdicts),
        ci=bootstrap_agreement(labels, verdicts, categories, quadratic=quadratic),
        confusion=matrix.tolist(),
    )


def judge_config(
    judge_model: str,
    *,
    metrics: Sequence[str] = (),
    llm_base: str | None = None,
    llm_key_env: str | None = None,
    llm_timeout: float | None = None,
) -> JudgeConfig:
    """The judge of ``--judge MODEL`` and its endpoint flags, as ``composer eval`` takes them."""
    fields: dict[str, Any] = {
        "model": judge_model,
        "api_base": llm_base,
        "api_key_env": llm_key_env,
        "timeout": llm_timeout,
    }
    if metrics:
        fields["metrics"] = tuple(metrics)
    try:
        return JudgeConfig.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        raise config_error(exc, "<command line>") from None


def log_check(result: CheckResult, tracking_uri: str, experiment: str) -> str:
    """``result`` as a finished MLflow run of ``experiment`` (metrics per metric and group, check.json and
    judged.csv as artifacts); returns the run id."""
    import tempfile

    from mlflow.entities import Metric, Param

    from composer.metrics.names import mlflow_metric_name
    from composer.tracking.evaluation import open_experiment

    client, found = open_experiment(tracking_uri, experiment)
    run = client.create_run(
        found, run_name=f"judge check {result.judge_model}", tags={"composer.kind": "judge_check"}
    )
    run_id = str(run.info.run_id)
    now = int(time.time() * 1000)
    metrics: list[Metric] = []
    for check in result.metrics.values():
        groups = {
            "all": check.overall,
            **{f"lang_{k}": v for k, v in check.by_language.items()},
            **{f"length_{k}": v for k, v in check.by_length.items()},
        }
        for group, a in groups.items():
            for name, value in (
                ("n", a.n),
                ("accuracy", a.accuracy),
                ("kappa", a.kappa),
                ("spearman", a.spearman),
            ):
                if value == value:  # NaN is no metric
                    metrics.append(
                        Metric(mlflow_metric_name(f"{check.metric}.{group}.{name}"), float(value), now, 0)
                    )
    params = [Param("judge", result.judge_model), Param("labels", result.labels[:500])]
    client.log_batch(run_id, metrics=metrics, params=params)
    with tempfile.TemporaryDirectory() as folder:
        result.save(folder)
        client.log_artifacts(run_id, folder)
    client.set_terminated(run_id)
    return run_id


def _row(j: Judged | None) -> dict[str, Any]:
    if j is None:
        return dict.fromkeys(
            ("id", "metric", "lang", "question", "answer", "label", "verdict", "score", "reason", "left_out",
             "rationale")
        )
    lb = j.label
    return {
        "id": lb.id,
        "metric": lb.metric,
        "lang": j.lang,
        "question": lb.question,
        "answer": lb.answer,
        "label": lb.label,
        "verdict": j.verdict,
        "score": j.score,
        "reason": j.reason,
        "left_out": j.left_out,
        "rationale": lb.rationale,
    }


def _num(value: float) -> float | None:
    return None if value != value else round(float(value), 4)


def figure(value: float | None) -> str:
    """An agreement figure as the tables print it: two decimals, "-" when undefined (None or NaN)."""
    return "-" if value is None or value != value else f"{value:.2f}"


def _short(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
