"""Human labels of judged metrics: what a judge's verdicts are checked against (``composer judges check``).

A labels file (JSON Lines, JSON, CSV, XLSX or Parquet, read by ``composer.data.readers``) holds one
labelled answer per row:

- ``id`` (also ``question_id``): the question's id; ``question``, ``reference_answer`` (also
  ``reference``) may come from ``--questions FILE`` by id instead;
- ``answer`` (also ``response``), ``contexts`` (also ``context``; in a table a JSON list);
- ``metric``: a judged metric (``answer_correctness``, ``faithfulness``, ``llm_judge_rating``...);
- ``label``: 0/1 (fail/pass) or 1-5 (a rating), one scale per metric; ``rationale`` optional;
- ``trial`` and ``judge_score`` (what ``composer label`` adds) are read and ignored; any other column is
  an error naming it, so a misspelt ``lable`` is not silently dropped.

Cells a spreadsheet would run as a formula (starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage
return) are written with a leading ``'`` (``csv_cell``) and read back without it (``plain_cell``).

Human feedback given in the MLflow UI on a study's traces (assessments whose source is HUMAN) is read
back into the same labels by ``labels_from_mlflow``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from composer.data.fields import Where, as_id, as_list, as_text, split_fields
from composer.data.readers import read_source
from composer.data.types import Question
from composer.errors import InputError
from composer.judges.panel import JUDGE_METRICS
from composer.metrics.names import mlflow_metric_name

Scale = Literal["binary", "ordinal"]
"""Pass/fail labels (0/1), or ordinal ratings (1-5)."""

RATING_ONLY = ("llm_judge_rating",)
"""Metrics whose labels can only be 1-5 ratings."""

_ALIASES = {
    **dict.fromkeys(("id", "question_id", "qid"), "id"),
    **dict.fromkeys(("question", "query", "user_input"), "question"),
    **dict.fromkeys(("answer", "response"), "answer"),
    **dict.fromkeys(("contexts", "context", "retrieved_contexts"), "contexts"),
    **dict.fromkeys(
        ("reference_answer", "reference", "ground_truth", "expected_response"), "reference_answer"
    ),
    "metric": "metric",
    **dict.fromkeys(("label", "human_label"), "label"),
    "rationale": "rationale",
}
IGNORED = ("trial", "judge_score")
"""Columns a labelling sheet adds (``composer.calibration.sheet``) that a labels file may keep."""
PASSAGE_METRICS = ("faithfulness", "context_precision", "context_recall")
"""Metrics judged against the answer's passages: their labels need the passages (``contexts``)."""
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True)
class Label:
    """One human verdict on one answer for one metric; ``source`` and ``line`` locate it for messages."""

    id: str
    question: str
    answer: str
    contexts: tuple[str, ...]
    reference_answer: str | None
    metric: str
    label: int
    rationale: str | None = None
    source: str = "<labels>"
    line: int = 0


def load_labels(source: Any, *, questions: Sequence[Question] | None = None) -> list[Label]:
    """Labels from a file, a DataFrame or a list of dicts; ``questions`` fill each row's missing question
    and reference answer by id. A bad row is an InputError naming the file, line and field; so is a metric
    whose labels mix pass/fail with ratings, and a second label of one answer for one metric."""
    records = read_source(source)
    by_id = {q.id: q for q in questions or ()}
    labels: list[Label] = []
    seen: dict[tuple[str, str], int] = {}
    for line, row in records.rows:
        where = Where(records.source, line, records.tabular)
        label = _label(row, where, by_id)
        first = seen.setdefault((label.id, label.metric), line)
        if first != line:
            raise where.error(
                f"answer '{label.id}' already has a {label.metric} label ({records.unit} {first})", field="id"
            )
        labels.append(label)
    check_scales(labels)
    return labels


def _label(row: Mapping[str, Any], where: Where, questions: Mapping[str, Question]) -> Label:
    if where.tabular:
        row = {k: plain_cell(v) for k, v in row.items()}
    fields, extra = split_fields(row, _ALIASES, where)
    unknown = [k for k in extra if k.strip().lower() not in IGNORED]
    if unknown:
        raise where.error(f"unknown column {unknown[0]!r}{_closest(unknown[0])}", field=unknown[0])
    label_id = as_id(fields.get("id"), where)
    if label_id is None:
        raise where.error("missing id", field="id")
    known = questions.get(label_id)
    question = (as_text(fields.get("question"), where, "question") or "").strip()
    if not question and known is not None:
        question = known.question
    if not question:
        hint = "" if questions else " (or give --questions FILE holding it by id)"
        raise where.error(f"missing question text{hint}", field="question")
    reference = (as_text(fields.get("reference_answer"), where, "reference_answer") or "").strip()
    if not reference and known is not None:
        reference = known.reference_answer or ""
    answer = (as_text(fields.get("answer"), where, "answer") or "").strip()
    if not answer:
        raise where.error("missing answer: a label grades an answer", field="answer")
    metric = (as_text(fields.get("metric"), where, "metric") or "").strip()
    if metric not in JUDGE_METRICS:
        raise where.error(
            f"unknown metric {metric!r}; expected one of {', '.join(JUDGE_METRICS)}", field="metric"
        )
    rationale = (as_text(fields.get("rationale"), where, "rationale") or "").strip()
    return Label(
        id=label_id,
        question=question,
        answer=answer,
        contexts=as_list(fields.get("contexts"), where, "contexts", ids=False),
        reference_answer=reference or None,
        metric=metric,
        label=label_value(fields.get("label"), where, metric),
        rationale=rationale or None,
        source=where.source,
        line=where.line,
    )


def label_value(value: Any, where: Where, metric: str) -> int:
    """A label as an integer: 0/1 (also true/false, pass/fail) or a 1-5 rating ("4", 4.0 accepted)."""
    words = {"true": 1, "false": 0, "pass": 1, "fail": 0, "yes": 1, "no": 0}
    if isinstance(value, bool):
        number: float = int(value)
    elif isinstance(value, int | float):
        number = value
    elif isinstance(value, str) and value.strip().lower() in words:
        number = words[value.strip().lower()]
    else:
        try:
            number = float(str(value).strip()) if value is not None else float("nan")
        except ValueError:
            number = float("nan")
    if number != number or not float(number).is_integer() or not 0 <= number <= 5:
        shown = "nothing" if value is None else repr(value)
        raise where.error(f"expected 0/1 (fail/pass) or a 1-5 rating, got {shown}", field="label")
    if metric in RATING_ONLY and number == 0:
        raise where.error(f"{metric} labels are 1-5 ratings, got 0", field="label")
    return int(number)


def scale_of(labels: Iterable[Label], metric: str) -> Scale:
    """Ratings for the rating metric or when any label is above 1, else pass/fail (``check_scales`` has
    made sure the labels leave no doubt)."""
    if metric in RATING_ONLY:
        return "ordinal"
    return "ordinal" if any(lb.label > 1 for lb in labels if lb.metric == metric) else "binary"


def check_scales(labels: Sequence[Label]) -> None:
    """One clear scale per metric, never guessed from a stray value: 0/1 labels with a 2 to 5 among
    them, or labels of only 1 and 2 (pass/fail with a slip, or ratings?), are an InputError naming the
    line of the label that does not fit."""
    for metric in dict.fromkeys(lb.metric for lb in labels):
        if metric in RATING_ONLY:
            continue
        mine = [lb for lb in labels if lb.metric == metric]
        values = {lb.label for lb in mine}
        if not values & {2, 3, 4, 5}:
            continue
        if 0 in values:
            ratings = [lb for lb in mine if lb.label > 1]
            zeros = [lb for lb in mine if lb.label == 0]
            odd = ratings[0] if len(ratings) <= len(zeros) else zeros[0]
            raise InputError(
                f"{metric} labels mix 0/1 (pass/fail) with 1-5 ratings (label {odd.label}): use one scale",
                path=odd.source, line=odd.line, field="label",
            )
        if values <= {1, 2}:
            two = next(lb for lb in mine if lb.label == 2)
            raise InputError(
                f"{metric} labels are only 1 and 2: pass/fail labels are 0/1, ratings use the 1-5 scale; "
                "write 0 for a fail, or rate on the whole scale",
                path=two.source, line=two.line, field="label",
            )


def check_passages(labels: Sequence[Label]) -> None:
    """Labels of a metric judged against passages (``PASSAGE_METRICS``) that have none are an
    InputError naming the file, how many and their lines: the judge would score them against nothing
    (every verdict "no retrieved context") and report agreement with that."""
    bare = [lb for lb in labels if lb.metric in PASSAGE_METRICS and not any(c.strip() for c in lb.contexts)]
    if not bare:
        return
    first = bare[0]
    lines = ", ".join(str(lb.line) for lb in bare[:5]) + (", ..." if len(bare) > 5 else "")
    metrics = ", ".join(dict.fromkeys(lb.metric for lb in bare))
    raise InputError(
        f"{len(bare)} {metrics} label{'s' * (len(bare) != 1)} without passages (lines {lines}): those "
        "metrics judge the answer against its passages; give them in the contexts column (`composer "
        "label` writes them when it can read the index)",
        path=first.source, line=first.line, field="contexts",
    )


def csv_cell(value: object) -> object:
    """A cell as a CSV for spreadsheets should hold it (OWASP's CSV injection advice): text that a
    spreadsheet would run as a formula gets a leading ``'``, as does text that starts with ``'`` before
    such a character, so that ``plain_cell`` gives every text back as it was."""
    if isinstance(value, str) and (value.startswith(_FORMULA) or _quoted(value)):
        return "'" + value
    return value


def plain_cell(value: object) -> object:
    """A cell of a labels table without the ``'`` that ``csv_cell`` put before it."""
    return value[1:] if isinstance(value, str) and _quoted(value) else value


def _quoted(text: str) -> bool:
    """Whether ``text`` is a ``'`` before formula text or before another such ``'``."""
    return text[:1] == "'" and (text[1:].startswith(_FORMULA) or _quoted(text[1:]))


def _closest(column: str) -> str:
    """" (did you mean 'label'?)" for the known column nearest a misspelt one, else a list of them."""
    import difflib

    known = [*dict.fromkeys(_ALIASES), *IGNORED]
    close = difflib.get_close_matches(column.strip().lower(), known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else f"; expected {', '.join(known)}"


def labels_from_mlflow(
    tracking_uri: str, experiment: str, *, metrics: Sequence[str] = JUDGE_METRICS, max_traces: int = 10_000
) -> list[Label]:
    """Human feedback (assessments with source type HUMAN, e.g. given in the MLflow UI) on the traces of
    ``experiment``, as labels: the trace's question, answer and retrieved passages, its expected response
    as the reference, the newest human verdict per metric. Feedback names are metric names (as logged:
    ``mlflow_metric_name``); values are booleans, 0/1 or 1-5."""
    from mlflow import MlflowClient
    from mlflow.entities import AssessmentSourceType, Feedback

    client = MlflowClient(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise InputError(f"no MLflow experiment named {experiment!r} in {tracking_uri}", field="experiment")
    names = {mlflow_metric_name(m): m for m in metrics}
    source = f"mlflow:{experiment}"
    newest: dict[tuple[str, str], Label] = {}
    page: str | None = None
    seen = 0
    while seen < max_traces:
        traces = client.search_traces(locations=[found.experiment_id], max_results=100, page_token=page)
        for trace in traces:
            seen += 1
            human = [
                a
                for a in trace.info.assessments or []
                if isinstance(a, Feedback)
                and a.source.source_type == AssessmentSourceType.HUMAN
                and a.name in names
            ]
            where = Where(f"{source} trace {trace.info.trace_id}", seen, tabular=False)
            for feedback in sorted(human, key=lambda a: a.create_time_ms or 0):  # the newest verdict wins
                metric = names[feedback.name]
                newest[trace.info.trace_id, metric] = _trace_label(trace, feedback, metric, where)
        page = traces.token
        if not page:
            break
    labels = list(newest.values())
    check_scales(labels)
    return labels


def _trace_label(trace: Any, feedback: Any, metric: str, where: Where) -> Label:
    """The label one human feedback gives its trace's answer."""
    root = next((s for s in trace.data.spans if s.parent_id is None), None)
    inputs = root.inputs if root is not None and isinstance(root.inputs, dict) else {}
    outputs = root.outputs if root is not None and isinstance(root.outputs, dict) else {}
    question = str(inputs.get("question") or trace.info.request_preview or "").strip()
    answer = str(outputs.get("answer") or trace.info.response_preview or "").strip()
    if not question or not answer:
        raise where.error("the trace has no question or no answer to label", field="question")
    expected = [
        a.value
        for a in trace.info.assessments or []
        if a.name == "expected_response" and isinstance(a.value, str)
    ]
    return Label(
        id=trace.info.trace_id,
        question=question,
        answer=answer,
        contexts=_trace_contexts(trace),
        reference_answer=expected[-1] if expected else None,
        metric=metric,
        label=label_value(feedback.value, where, metric),
        rationale=feedback.rationale,
        source=where.source,
        line=where.line,
    )


def _trace_contexts(trace: Any) -> tuple[str, ...]:
    """The passages a trace's answer was given: the last retriever or reranker span's documents."""
    passages: tuple[str, ...] = ()
    for span in trace.data.spans:
        outputs = span.outputs
        if span.span_type in ("RETRIEVER", "RERANKER") and isinstance(outputs, list):
            texts = tuple(
                str(d["page_content"]) for d in outputs if isinstance(d, dict) and d.get("page_content")
            )
            passages = texts or passages
    return passages
