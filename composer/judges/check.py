"""``composer judges check``: judge human-labelled answers and measure how well the judge agrees.

Each labelled answer is judged exactly as a study judges (the same judges, prompts and LLM reply cache:
a rerun sends nothing), its score turned into a verdict on the label's scale (pass when the score is at
least ``threshold``; a 1-5 rating as 1 + 4 x score, rounded), and the verdicts compared with the labels
per metric, per language and per answer-length tercile (a judge that likes long answers shows there).
"""

from __future__ import annotations

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
from composer.errors import ComposerError, InputError, config_error
from composer.files import write_atomic
from composer.generation.generator import Answer
from composer.judges.agreement import bootstrap_agreement, confusion, kappa_of, spearman, terciles
from composer.judges.config import JudgeConfig
from composer.judges.labels import Label, Scale, check_passages, csv_cell, scale_of
from composer.judges.panel import judge_answers
from composer.judges.trust import judge_key, store_checks
from composer.llm.config import LLMConfig
from composer.llm.prompt import prompt_language
from composer.llm.usage import track_usage
from composer.text import detect_language

if TYPE_CHECKING:
    from rich.console import RenderableType

    from composer.evaluation.scoring import Judging

DEFAULT_THRESHOLD = 0.5
"""A judged score at least this high is a pass, for pass/fail labels."""
CATEGORIES: dict[Scale, tuple[int, ...]] = {"binary": (0, 1), "ordinal": (1, 2, 3, 4, 5)}
TERCILES = ("short", "medium", "long")


@dataclass(frozen=True)
class Judged:
    """One labelled answer with the judge's verdict (None: not scored, ``reason`` says why)."""

    label: Label
    verdict: int | None
    score: float | None
    reason: str
    lang: str
    length: int = 0


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

    @property
    def unscored(self) -> int:
        return sum(1 for j in self.judged if j.verdict is None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "scale": self.scale,
            "categories": list(CATEGORIES[self.scale]),
            "judge_key": self.key,
            **self.overall.to_dict(),
            "unscored": self.unscored,
            "by_language": {k: v.to_dict() for k, v in self.by_language.items()},
            "by_length": {k: v.to_dict() for k, v in self.by_length.items()},
            "worst": [_row(j) for j in self.worst],
        }


@dataclass
class CheckResult:
    """A judge checked against labels: per metric agreement, and what the judging cost."""

    judge: str
    labels: str
    metrics: dict[str, MetricCheck]
    usage: dict[str, Any] = field(default_factory=dict)
    created: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {
            "judge": self.judge,
            "labels": self.labels,
            "created": self.created,
            "metrics": {m: c.to_dict() for m, c in self.metrics.items()},
            "usage": self.usage,
        }

    def records(self) -> dict[str, dict[str, Any]]:
        """What ``composer.judges.trust`` stores per judge key: the headline figures, not the answers."""
        out: dict[str, dict[str, Any]] = {}
        for check in self.metrics.values():
            overall = check.overall.to_dict()
            out[check.key] = {
                "judge": self.judge,
                "metric": check.metric,
                "scale": check.scale,
                "labels": self.labels,
                "created": self.created,
                **{k: overall[k] for k in ("n", "accuracy", "kappa", "spearman", "ci")},
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

        table = Table(title=f"Judge {self.judge} against {self.labels}")
        for name in ("metric", "group", "n", "accuracy", "kappa [95% CI]", "spearman"):
            table.add_column(name, justify="left" if name in ("metric", "group") else "right")
        for check in self.metrics.values():
            kind = "weighted kappa" if check.scale == "ordinal" else "kappa"
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
                    _fmt(a.accuracy),
                    f"{_fmt(a.kappa)} [{_fmt(low)}, {_fmt(high)}]",
                    _fmt(a.spearman),
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
    need their passages: ``check_passages``). The result is stored for ``latest_check`` unless ``store``
    is false."""
    from composer.evaluation.scoring import make_judging

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
    name = judging.model
    result = CheckResult(
        name, source or (labels[0].source if labels else "<labels>"), checks, usage.to_dict()
    )
    if store:
        store_checks(workdir, result.records())
    return result


def _check_metric(
    judging: Judging, labels: list[Label], metric: str, threshold: float, worst: int
) -> MetricCheck:
    questions = [Question(lb.id, lb.question, reference_answer=lb.reference_answer) for lb in labels]
    answers = {lb.id: Answer(lb.answer, prompt_language(lb.question), None, lb.contexts) for lb in labels}
    results = judge_answers(questions, answers, {metric: judging.judges[metric]})
    scale = scale_of(labels, metric)
    judged: list[Judged] = []
    for lb in labels:
        sample = results.get(lb.id)
        if sample is None or sample.failed:  # a fallback's score is not the judge's verdict
            why = "; ".join(sample.failures) if sample is not None else "not judged"
            judged.append(Judged(lb, None, None, why, detect_language(lb.question), len(lb.answer.split())))
            continue
        score = sample.metrics.get(metric)
        rating = sample.details.get(metric, {}).get("rating")
        judged.append(
            Judged(
                lb,
                verdict(score, scale, threshold, rating),
                score,
                sample.reasons.get(metric, ""),
                detect_language(lb.question),
                len(lb.answer.split()),
            )
        )
    if not any(j.verdict is not None for j in judged):
        raise ComposerError(
            f"the judge scored none of the {len(judged)} {metric} labels; the first: {judged[0].reason}"
        )
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
    config = judging.client.config
    return MetricCheck(
        metric,
        scale,
        judge_key(config, judging.settings, metric),
        agreement(scored, cats),
        by_language,
        by_length,
        judged,
        ranked[:worst],
    )


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
    judge: str,
    *,
    metrics: Sequence[str] = (),
    llm_base: str | None = None,
    llm_key_env: str | None = None,
    llm_timeout: float | None = None,
) -> JudgeConfig:
    """The judge of ``--judge MODEL`` and its endpoint flags, as ``composer eval`` takes them."""
    fields: dict[str, Any] = {
        "model": judge,
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

    from composer.tracking.evaluation import open_experiment
    from composer.tracking.runs import mlflow_metric_name

    client, found = open_experiment(tracking_uri, experiment)
    run = client.create_run(
        found, run_name=f"judge check {result.judge}", tags={"composer.kind": "judge_check"}
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
    params = [Param("judge", result.judge), Param("labels", result.labels[:500])]
    client.log_batch(run_id, metrics=metrics, params=params)
    with tempfile.TemporaryDirectory() as folder:
        result.save(folder)
        client.log_artifacts(run_id, folder)
    client.set_terminated(run_id)
    return run_id


def _row(j: Judged | None) -> dict[str, Any]:
    if j is None:
        return dict.fromkeys(
            ("id", "metric", "lang", "question", "answer", "label", "verdict", "score", "reason", "rationale")
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
        "rationale": lb.rationale,
    }


def _num(value: float) -> float | None:
    return None if value != value else round(float(value), 4)


def _fmt(value: float) -> str:
    return "-" if value != value else f"{value:.2f}"


def _short(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
