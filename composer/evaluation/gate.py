"""The CI gate: is a new pipeline worse than a baseline on the same questions?

Both systems' per-question scores are paired by question id and the study's own statistic decides: the
objective's composite (``Objective.difference``: the paired bootstrap CI the held-out verdict reads), or
one metric as an objective of weight 1. The new system fails when the 95% CI of new minus baseline lies
below 0 (significantly worse) or its mean difference is below ``-margin``.

The baseline is an earlier ``composer eval --out`` folder (its traces.jsonl holds every question's
metrics, its summary.json the objective it was scored with) or a system scored on the same questions. A
gate never passes what it could not compare: a metric of a stated objective that one side did not score,
or did not score as a finite number in its range, is bad input (exit 2), never a 0 that hands the other
side the win; the default objective is cut to the metrics both sides scored, with a note.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from pydantic import ValidationError

from composer.data.fields import UniqueIds, Where
from composer.errors import ConfigError, InputError, config_error
from composer.evaluation.report import GateResult
from composer.metrics.directions import bounds, refusal
from composer.metrics.retrieval import RETRIEVAL_METRICS

if TYPE_CHECKING:
    from rich.console import Group

    from composer.evaluation.report import EvaluationReport
    from composer.objective import Objective, ObjectiveConfig

logger = logging.getLogger(__name__)

COMPOSITE = "composite"
TRACES = "traces.jsonl"
SUMMARY = "summary.json"
MIN_QUESTIONS = 5
"""Below this many questions the gate still decides, with a warning: its bootstrap CI means little."""


@dataclass(frozen=True)
class Scores:
    """One system's per-question metric columns (NaN = not scored), row i being ``question_ids[i]``;
    ``source`` names where they came from for messages, ``objective`` the weights they were scored with,
    ``conversations`` each question's conversation (None: lone questions), which the bootstrap draws whole."""

    question_ids: tuple[str, ...]
    metrics: Mapping[str, npt.NDArray[np.float64]]
    source: str
    objective: ObjectiveConfig | None = None
    conversations: tuple[str, ...] | None = None

    @classmethod
    def of(cls, report: EvaluationReport, source: str) -> Scores:
        return cls(tuple(report.table.question_ids), dict(report.table.metrics), source,
                   objective_of_summary(report.meta.get("objective"), source), report.table.conversations)

    def available(self) -> set[str]:
        """The metrics at least one question scored."""
        return {name for name, column in self.metrics.items() if (~np.isnan(column)).any()}

    def require(self, objective: Objective, role: str) -> None:
        """Every metric ``objective`` weighs has a value here, and only finite ones: counted as 0, a metric
        this side did not score would hand the other side the win (a baseline run without answers, all
        NaN, against a system that answers)."""
        for key in objective.weights:
            column = self.metrics.get(key)
            if column is None or np.isnan(column).all():
                raise InputError(f"the {role} has no value of {key!r}, which the gate weighs, so it cannot "
                                 "compare the two: gate on metrics both sides scored (--objective, --metric)",
                                 path=self.source, field=key)
            if np.isinf(column).any():
                raise InputError(f"the {role}'s {key!r} holds an infinite value", path=self.source, field=key)

    def aligned_to(self, other: Scores) -> Scores:
        """These scores in ``other``'s question order; the two must hold the same questions, or the gate
        would compare different sets."""
        rows = {qid: i for i, qid in enumerate(self.question_ids)}
        missing = [qid for qid in other.question_ids if qid not in rows]
        extra = sorted(set(rows) - set(other.question_ids))
        if missing or extra:
            sides = ((missing, other.source, self.source), (extra, self.source, other.source))
            parts = [f"{len(ids)} of {a}'s questions are not in {b} (e.g. {', '.join(ids[:3])})"
                     for ids, a, b in sides if ids]
            raise InputError(f"the baseline was scored on other questions: {'; '.join(parts)}: compare the "
                             "same question set (and --split)", path=self.source)
        order = np.array([rows[qid] for qid in other.question_ids], dtype=np.intp)
        return Scores(other.question_ids, {k: v[order] for k, v in self.metrics.items()}, self.source,
                      self.objective, other.conversations)


def compare(new: Scores, old: Scores, objective: Objective, *, metric: str, margin: float) -> GateResult:
    """The verdict on ``new`` against ``old`` (matched by question id) under ``objective``."""
    if not math.isfinite(margin) or margin < 0:
        raise InputError(f"the margin must be a number >= 0, got {margin}", field="margin")
    paired = old.aligned_to(new)
    new.require(objective, "new system")
    paired.require(objective, "baseline")
    # The new set's conversations are resampled whole: its turns are not independent.
    difference, (low, high) = objective.difference(new.metrics, paired.metrics, new.conversations)
    new_value = objective.composite(_means(new.metrics))
    old_value = objective.composite(_means(paired.metrics))
    passed = high >= 0 and difference >= -margin
    n = len(new.question_ids)
    notes = objective.notes
    if n < MIN_QUESTIONS:
        notes += (f"only {n} question(s): the 95% CI means little below {MIN_QUESTIONS}; gate on more",)
        logger.warning(notes[-1])
    return GateResult(metric, dict(objective.weights), n, new_value, old_value, difference, (low, high),
                      margin, passed, _reason(difference, low, high, margin), old.source, notes)


def _reason(difference: float, low: float, high: float, margin: float) -> str:
    ci = f"95% CI of new - baseline [{low:+.4f}, {high:+.4f}]"
    if high < 0:
        return f"significantly worse: {ci} lies below 0"
    if difference < -margin:
        return f"worse by {-difference:.4f}, more than the margin {margin:g} ({ci})"
    if low > 0:
        return f"significantly better: {ci} lies above 0"
    return f"no significant drop: {difference:+.4f} is within the margin {margin:g} ({ci})"


def run_gate(report: EvaluationReport, source: str, old: Scores, *, metric: str, margin: float) -> GateResult:
    """The verdict on ``report`` (the new system's, on the questions of ``source``) against ``old``: under
    the objective the report states, else the one the baseline recorded, else the study's default over
    the metrics both sides scored (``shared``)."""
    new = Scores.of(report, source)
    stated = new.objective or old.objective
    objective = gate_objective(metric, stated, new.available() | old.available())
    if metric == COMPOSITE and stated is None:
        objective = shared(objective, new, old)
    return compare(new, old, objective, metric=metric, margin=margin)


def shared(objective: Objective, new: Scores, old: Scores) -> Objective:
    """The default objective over the metrics both sides scored, with a note naming those left out: a
    retrieval-only system has no answer metrics, and counting them 0 called a better retriever
    "significantly worse". A stated objective is never cut (``Scores.require`` refuses it instead); with
    no weighted metric scored on both sides the gate refuses (exit 2)."""
    from composer.objective import Objective

    both = new.available() & old.available()
    kept = {key: weight for key, weight in objective.weights.items() if key in both}
    lacking = {key: "the baseline" if key in new.available() else "the new system"
               for key in objective.weights if key not in both}
    if not lacking:
        return objective
    named = ", ".join(f"{key} (not scored by {side})" for key, side in lacking.items())
    if not kept:
        raise InputError(f"the new system and the baseline share none of the metrics the default objective "
                         f"weighs: {named}; gate on a metric both score (--metric, --objective)",
                         field="objective")
    total = sum(kept.values())
    note = f"compared on the metrics both sides scored ({', '.join(kept)}); left out: {named}"
    logger.warning(note)
    return Objective({k: w / total for k, w in kept.items()}, objective.secondary, (*objective.notes, note))


def _means(columns: Mapping[str, npt.NDArray[np.float64]]) -> dict[str, float | None]:
    return {k: float(np.mean(v[~np.isnan(v)])) if (~np.isnan(v)).any() else None for k, v in columns.items()}


def gate_objective(metric: str, stated: ObjectiveConfig | None, available: set[str]) -> Objective:
    """What the gate compares: the composite of the stated objective (the study's default objective when
    none is stated), or one scored metric (``ndcg@10``) with weight 1."""
    from composer.objective import Objective, ObjectiveConfig

    if metric == COMPOSITE:
        return Objective.resolve(stated or ObjectiveConfig(), available)
    if (why := refusal(metric, "the gate")) is not None:
        raise InputError(why, field="metric")
    if metric not in available:
        raise InputError(f"{metric!r} is not scored in this evaluation; scored: {COMPOSITE}, "
                         f"{', '.join(sorted(available))}", field="metric")
    return Objective({metric: 1.0})


def cutoffs_to_score(ks: Sequence[int], stated: ObjectiveConfig | None, metric: str | None) -> list[int]:
    """The cutoffs asked for, plus those the report's composite reads (the stated objective's; a gate on
    the composite without one reads the default's) and a gate's ``name@k`` ``metric`` (None: no gate):
    ``--k 5`` with an objective at @10 scores both, rather than refusing an objective it never named."""
    from composer.objective import ObjectiveConfig, cutoffs

    extra: set[int] = set()
    if stated is not None or metric == COMPOSITE:
        extra |= cutoffs(stated or ObjectiveConfig())
    if metric is not None:
        base, _, k = metric.partition("@")
        if base in RETRIEVAL_METRICS and k.isdigit() and int(k) >= 1:
            extra.add(int(k))
    return sorted({*ks, *extra})


def read_scores(folder: Path) -> Scores:
    """The per-question metrics an ``eval --out`` folder holds (its traces.jsonl), and the objective its
    summary.json recorded, if any."""
    from composer.data.readers import read_records

    if not folder.is_dir():
        raise InputError("not an `eval --out` folder (or it does not exist)", path=folder)
    traces = folder / TRACES
    if not traces.exists():
        raise InputError(f"no {TRACES} here: give a folder `composer eval --out` wrote", path=folder)
    ids: list[str] = []
    rows: list[Mapping[str, float]] = []
    unique = UniqueIds("question", "line")
    for line, row in read_records(traces).rows:
        where = Where(str(traces), line, tabular=False)
        qid, metrics = row.get("question_id"), row.get("metrics", {})
        if not isinstance(qid, str) or not isinstance(metrics, dict):
            raise where.error("expected a trace with question_id and metrics")
        unique.add(qid, where)
        ids.append(qid)
        rows.append({name: _number(value, name, where) for name, value in metrics.items()})
    names = list(dict.fromkeys(name for metrics in rows for name in metrics))
    columns = {name: np.array([m.get(name, math.nan) for m in rows], dtype=np.float64) for name in names}
    summary = folder / SUMMARY
    return Scores(tuple(ids), columns, str(traces), objective_of_summary(_recorded(summary), str(summary)))


def _recorded(summary: Path) -> Any:
    """The objective section of an --out folder's summary.json (None without one)."""
    from composer.data.readers import read_text

    if not summary.exists():
        return None
    try:
        doc = json.loads(read_text(summary))
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg}", path=summary, line=exc.lineno) from None
    return doc.get("objective") if isinstance(doc, dict) else None


def _number(value: Any, name: str, where: Where) -> float:
    """One question's value of metric ``name`` (NaN: not scored), a finite number in the metric's range."""
    field = f"metrics.{name}"
    if isinstance(value, bool) or not isinstance(value, int | float | None):
        raise where.error(f"a metric is not a number: {value!r}", field=field)
    if value is None:
        return math.nan
    if not math.isfinite(value):
        raise where.error(f"a metric is not a finite number: {value!r}", field=field)
    span = bounds(name)
    if span is not None and not span[0] <= value <= span[1]:
        raise where.error(f"{value!r} is out of {name}'s range [{span[0]:g}, {span[1]:g}]", field=field)
    return float(value)


def check_baseline_file(path: Path) -> None:
    """A baseline pipeline YAML holds settings: an empty one (what a failed ``git show REV:FILE >
    baseline.yaml`` leaves) would be gated as the default pipeline."""
    from composer.yamlfile import read_yaml

    if not read_yaml(path, what="pipeline file"):
        raise InputError("the baseline pipeline file is empty: nothing to compare against (did the command "
                         "that wrote it fail?)", path=path)


def objective_of_summary(section: Any, source: str) -> ObjectiveConfig | None:
    """The objective a report recorded, if any: as stated (``stated``: its metrics and cutoff, before
    they were resolved against what the report scored, so a gate still sees a metric the report lacks),
    else its resolved ``weights`` (a summary written before ``stated`` was kept)."""
    if not isinstance(section, Mapping) or not section.get("weights"):
        return None
    stated = section.get("stated")
    if isinstance(stated, Mapping) and stated.get("metrics"):
        return _objective_config(stated, source, "objective.stated")
    return _objective_config({"metrics": section["weights"]}, source, "objective.weights")


def export_objective(path: Path) -> ObjectiveConfig | None:
    """The objective an exported best.yaml carries (its resolved weights, at the study's cutoff), if any."""
    from composer.yamlfile import read_yaml

    doc = read_yaml(path, what="pipeline file")
    section = doc.get("objective") if isinstance(doc, dict) else None
    if not isinstance(section, dict) or not section.get("weights"):
        return None
    data = {"metrics": section["weights"], **({"k": section["k_eval"]} if section.get("k_eval") else {})}
    return _objective_config(data, path, "objective.weights")


def stated_objective(
    spec: str | Path | Mapping[str, float] | None, *exports: object
) -> tuple[ObjectiveConfig, str] | None:
    """The objective whose composite a report carries, and where it came from: ``spec`` (``--objective``,
    ``objective=``), else that of the first exported pipeline YAML among ``exports`` that has one."""
    if spec is not None:
        return parse_objective(spec), str(spec) if isinstance(spec, str | Path) else "objective="
    for path in exports:
        if isinstance(path, str | Path) and Path(path).suffix.lower() in (".yaml", ".yml"):
            found = export_objective(Path(path))
            if found is not None:
                return found, str(path)
    return None


def parse_objective(spec: str | Path | Mapping[str, float]) -> ObjectiveConfig:
    """An objective given as weights (``{"recall@10": 1}``, or inline ``recall@10=1,ndcg@10=1``) or a YAML
    file: an exported best.yaml, an experiment or any file with an ``objective:`` block, or the block."""
    from composer.yamlfile import read_yaml

    if isinstance(spec, Mapping):
        return _objective_config({"metrics": dict(spec)}, "objective=", "objective")
    path = Path(spec)
    if isinstance(spec, str) and "=" in spec and not path.exists():
        weights: dict[str, Any] = {}
        for part in (p.strip() for p in spec.split(",") if p.strip()):
            name, eq, value = part.partition("=")
            try:
                weights[name.strip()] = float(value)
            except ValueError:
                raise InputError(f"expected METRIC=WEIGHT, got {part!r}", field="objective") from None
            if not eq or not name.strip():
                raise InputError(f"expected METRIC=WEIGHT, got {part!r}", field="objective")
        return _objective_config({"metrics": weights}, spec, "objective")
    found = export_objective(path)
    if found is not None:
        return found
    doc = read_yaml(path, what="objective file")
    block = doc.get("objective", doc) if isinstance(doc, dict) else None
    if not isinstance(block, dict) or "metrics" not in block:
        raise ConfigError("expected an `objective:` block with metrics (or METRIC=WEIGHT,...)", path=path,
                          field="objective")
    return _objective_config({k: v for k, v in block.items() if k != "secondary"}, path, "objective")


def _objective_config(data: Mapping[str, Any], source: str | Path, under: str) -> ObjectiveConfig:
    from composer.objective import ObjectiveConfig

    try:
        return ObjectiveConfig.model_validate(dict(data))
    except ValidationError as exc:
        raise config_error(exc, source, under=under) from None


def with_objective(report: EvaluationReport, config: ObjectiveConfig, source: str) -> EvaluationReport:
    """The report with the composite of a stated objective (``summary()["objective"]``): its resolved
    weights, the value, where the objective came from, and the objective as stated."""
    from composer.objective import Objective

    means = report.means()
    objective = Objective.resolve(config, set(means))
    value = objective.composite({k: v for k, v in means.items() if k in objective.weights})
    return report.with_meta({"objective": {"weights": dict(objective.weights), "composite": value,
                                           "source": source,
                                           "stated": {"metrics": dict(config.metrics), "k": config.k}}})


def render_gate(result: GateResult) -> Group:
    """The verdict as a title line, a short table (both scores, the difference with its CI, the decision)
    and its reason; plain text throughout, so a metric name or a path is never read as markup."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(show_header=False)
    table.add_column("", style="bold")
    table.add_column("", justify="right")
    low, high = result.ci95
    rows = [("new", f"{result.new:.4f}"), ("baseline", f"{result.baseline:.4f}"),
            ("difference", f"{result.difference:+.4f}"), ("95% CI", f"[{low:+.4f}, {high:+.4f}]"),
            ("margin", f"{result.margin:g}")]
    for name, value in rows:
        table.add_row(name, Text(value))
    decision = Text("PASS", style="bold green") if result.passed else Text("FAIL", style="bold red")
    table.add_row("decision", decision)
    title = Text(f"CI gate: {result.metric} of the new system minus the baseline's, over {result.n} "
                 "questions")
    notes = [Text(f"note: {note}", style="yellow") for note in result.notes]
    return Group(title, table, Text(result.reason), *notes)
