"""A labelling sheet (``composer label``): answers from a study's trials for people to label, so that the
judge can be checked against them (``composer judges check``).

The answers are drawn across trials (spread over the leaderboard, best to worst) and across the judge's
scores (bad, middling, good), so the labels cover several configurations and the judge's whole range, not
only the winner's best answers. Its CSV, once its ``label`` column is filled in, is a labels file
(``composer.judges.labels.load_labels``); its HTML page shows each text in its own direction (Arabic and
Persian right to left) for reading while labelling.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
import random
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer.errors import InputError
from composer.files import plain_name, write_atomic
from composer.judges.labels import csv_cell
from composer.judges.panel import JUDGE_METRICS
from composer.redact import scrub_url

if TYPE_CHECKING:
    import pandas as pd
    from mlflow import MlflowClient

    from composer.study.experiment import ExperimentConfig

SHEET_TRIALS = 10
"""At most this many trials feed a sheet, spread over the leaderboard from best to worst."""
COLUMNS = ("id", "question", "answer", "contexts", "reference_answer", "metric", "label", "rationale",
           "trial", "judge_score")
"""The CSV's columns: a labels file's (``label`` and ``rationale`` left to fill in), then the trial and the
judge's score, which the labels reader ignores."""
BANDS = ("bad", "middling", "good")
"""The judge's score in thirds of [0, 1]."""


@dataclass(frozen=True)
class SheetRow:
    """One answer to label; ``id`` names the answer (question id @ trial: a labels file holds one label
    per answer and metric, and a question has an answer in each trial)."""

    id: str
    question: str
    answer: str
    contexts: tuple[str, ...]
    reference_answer: str | None
    metric: str
    trial: int
    judge_score: float | None


@dataclass(frozen=True)
class LabellingSheet:
    """The rows to label, and where the trials they come from are in MLflow (for links to their traces)."""

    study: str
    metric: str
    rows: list[SheetRow]
    experiment_id: str
    runs: dict[int, str]
    """Trial number -> MLflow run id, for the trials the rows come from."""
    missing_contexts: int = 0
    """Rows without some of their passages: neither the study's MLflow run nor the work dir's saved
    index holds them."""

    def to_csv(self) -> str:
        """The sheet as CSV (contexts as a JSON list), with a byte-order mark so spreadsheets read the
        Arabic and Persian text as UTF-8 (the labels reader drops the mark), and no cell a spreadsheet
        would run as a formula (``csv_cell``; the reader gives the text back as it was)."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(COLUMNS)
        for r in self.rows:
            score = "" if r.judge_score is None else repr(r.judge_score)
            cells = [r.id, r.question, r.answer, json.dumps(list(r.contexts), ensure_ascii=False),
                     r.reference_answer or "", r.metric, "", "", r.trial, score]
            writer.writerow([csv_cell(c) for c in cells])
        return "\ufeff" + out.getvalue()

    def to_html(self) -> str:
        """One self-contained page, no scripts, every text escaped and shown in its own direction."""
        count = len(self.rows)
        title = f"Label {self.metric}: study {self.study} ({count} answer{'s' * (count != 1)})"
        scale = ("1-5 (a rating)" if self.metric == "llm_judge_rating"
                 else "1 (pass) or 0 (fail), or a 1-5 rating: one scale for the whole sheet")
        items = "\n".join(_html_row(n, r) for n, r in enumerate(self.rows, 1))
        return (
            '<!doctype html>\n<html lang="und"><head><meta charset="utf-8">'
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{html.escape(title)}</h1>"
            f"<p>Fill in the <code>label</code> column of labels.csv for each id: {html.escape(scale)} "
            f"for <code>{html.escape(self.metric)}</code>; a <code>rationale</code> is optional. The judge's "
            "score is folded away: read the answer first.</p>\n"
            f"{items}\n</body></html>\n"
        )

    def save(self, folder: Path) -> tuple[Path, Path]:
        """Write ``labels.csv`` and ``labels.html`` into ``folder``; their paths."""
        folder.mkdir(parents=True, exist_ok=True)
        table, page = folder / "labels.csv", folder / "labels.html"
        write_atomic(table, self.to_csv())
        write_atomic(page, self.to_html())
        return table, page


def _html_row(number: int, row: SheetRow) -> str:
    contexts = "".join(f'<li dir="auto">{html.escape(c)}</li>' for c in row.contexts) or "<li>none</li>"
    reference = ("" if row.reference_answer is None else
                 f'<dt>reference answer</dt><dd dir="auto">{html.escape(row.reference_answer)}</dd>')
    score = "none" if row.judge_score is None else f"{row.judge_score:.3f}"
    return (
        f'<section><h2>{number}. <code dir="ltr">{html.escape(row.id)}</code></h2><dl>'
        f'<dt>question</dt><dd dir="auto">{html.escape(row.question)}</dd>'
        f'<dt>answer</dt><dd dir="auto" class="answer">{html.escape(row.answer)}</dd>{reference}'
        f"<dt>passages</dt><dd><ol>{contexts}</ol></dd></dl>"
        f"<details><summary>trial and judge's score</summary>trial {row.trial}, "
        f"{html.escape(row.metric)} {score}</details></section>"
    )


STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:960px}"
    "section{border-top:1px solid #ccc;padding:.5em 0}dt{font-weight:bold;margin-top:.4em}"
    "dd{margin:0;margin-inline-start:1em;unicode-bidi:plaintext;white-space:pre-wrap}li{unicode-bidi:plaintext}"
    ".answer{background:#f6f6f0;padding:.3em}details{color:#666;font-size:small}"
)


def labelling_sheet(
    exp: ExperimentConfig,
    study: str | None = None,
    *,
    storage: str | None = None,
    trial: int | None = None,
    n: int = 60,
    metric: str | None = None,
    seed: int = 0,
) -> LabellingSheet:
    """``n`` answers of the study's trials to label for ``metric`` (default: the judge's first metric,
    else faithfulness), stratified over trials and the judge's score; or from trial ``trial`` only. The
    answers, scores and passages are read from the trials' MLflow runs. An unknown study or trial, or a
    trial without answers, is an InputError."""
    from mlflow import MlflowClient

    from composer.pipeline.saved import SAVED_DIR
    from composer.store import sqlite_file
    from composer.study.leaderboard import leaderboard
    from composer.study.study import load_study
    from composer.tracking.read import study_runs, trial_config

    name = study or exp.name
    chosen = metric or (exp.judge.metrics[0] if exp.judge is not None else "faithfulness")
    if chosen not in JUDGE_METRICS:
        raise InputError(f"unknown metric {chosen!r}; expected one of {', '.join(JUDGE_METRICS)}",
                         field="metric")
    found_study = load_study(name, storage or exp.storage_url)
    board = leaderboard(found_study)
    limits = {t.number: _max_contexts(trial_config(t)) for t in found_study.get_trials(deepcopy=False)}
    store = sqlite_file(exp.tracking_uri)
    if store is not None and not store.exists():  # opening it would create an empty store
        raise InputError(f"no MLflow store at {store}: the study's runs are read from it", field="study")
    client = MlflowClient(exp.tracking_uri)
    found = client.get_experiment_by_name(exp.mlflow_experiment)
    parent, runs = (None, {}) if found is None else study_runs(client, str(found.experiment_id), name)
    if found is None or not runs:
        raise InputError(f"no MLflow runs of study {name!r} in experiment {exp.mlflow_experiment!r} of "
                         f"{scrub_url(exp.tracking_uri)}", field="study")
    keys = {int(t): k for t, k in zip(board["trial"], board["index_key"], strict=True) if isinstance(k, str)}
    tables = _answer_tables(client, name, _trials(board, runs, name, trial), runs, trial)
    rows = _pick(_candidates(tables, chosen, limits), n, random.Random(seed))
    texts = _chunk_texts(client, parent, {keys[r.trial] for r in rows if r.trial in keys}, rows,
                         exp.work_dir / SAVED_DIR, exp.qdrant)
    return _sheet(name, chosen, rows, texts, keys, str(found.experiment_id), runs)


@dataclass(frozen=True)
class _Candidate:
    question_id: str
    trial: int
    question: str
    answer: str
    reference: str | None
    retrieved: tuple[str, ...]
    score: float | None


def _trials(board: pd.DataFrame, runs: dict[int, str], study: str, trial: int | None) -> list[int]:
    """The trials to draw from: ``trial`` alone, else at most ``SHEET_TRIALS`` complete or pruned ones
    with a run (a repeat of an earlier configuration left out), spread from the best to the worst."""
    numbers = [int(t) for t in board["trial"]]
    if trial is not None:
        if trial not in numbers:
            shown = f"{min(numbers)}-{max(numbers)}" if numbers else "none finished"
            raise InputError(f"no trial {trial} in study {study!r} (trials: {shown})", field="trial")
        if trial not in runs:
            raise InputError(f"trial {trial} of study {study!r} has no MLflow run", field="trial")
        return [trial]
    ran = board[board["state"].isin(["COMPLETE", "PRUNED"]) & board["duplicate_of"].isna()]
    ranked = [int(t) for t in ran["trial"] if int(t) in runs]
    if len(ranked) <= SHEET_TRIALS:
        return ranked
    step = (len(ranked) - 1) / (SHEET_TRIALS - 1)
    return [ranked[round(i * step)] for i in range(SHEET_TRIALS)]


def _answer_tables(client: MlflowClient, study: str, trials: Sequence[int], runs: dict[int, str],
                   wanted: int | None) -> dict[int, pd.DataFrame]:
    """Each trial's per-question table (``questions.json``) cut to the questions it answered; a trial
    with none is left out, or refused when it is the one asked for."""
    from mlflow.exceptions import MlflowException

    from composer.tracking.read import read_question_table

    tables: dict[int, pd.DataFrame] = {}
    for number in trials:
        try:
            table = read_question_table(client, runs[number])
        except (MlflowException, OSError):  # failed before its report, or a run written before tables
            table = None
        if table is not None and "answer" in table.columns:
            table = table[[isinstance(a, str) and bool(a.strip()) for a in table["answer"]]]
        if table is not None and len(table):
            tables[number] = table
        elif wanted is not None:
            raise InputError(f"trial {number} of study {study!r} has no answers to label (a retrieval-only "
                             "trial, or one that failed before its report)", field="trial")
    if not tables:
        raise InputError(f"no trial of study {study!r} has answers to label (retrieval-only trials: give "
                         "the study an LLM to answer with)", field="study")
    return tables


def _max_contexts(config: Mapping[str, Any]) -> int:
    """How many of its top hits a trial's answers were generated from (and judged against)."""
    from composer.generation.config import GenerationConfig

    generation = config.get("generation")
    value = generation.get("max_contexts") if isinstance(generation, Mapping) else None
    default = GenerationConfig.model_fields["max_contexts"].default
    return int(value) if isinstance(value, int) else int(default)


def _candidates(tables: dict[int, pd.DataFrame], metric: str, limits: Mapping[int, int]) -> list[_Candidate]:
    """Every answer of every table, with the passages it was generated from (ids) and its judged score."""
    out = []
    for number, table in tables.items():
        scores = table[metric] if metric in table.columns else [None] * len(table)
        for qid, question, answer, reference, retrieved, score in zip(
            table["question_id"], table["question"], table["answer"], table["expected_response"],
            table["retrieved_ids"], scores, strict=True,
        ):
            value = None if score is None or math.isnan(float(score)) else float(score)
            out.append(_Candidate(str(qid), number, str(question), str(answer).strip(),
                                  reference if isinstance(reference, str) and reference.strip() else None,
                                  tuple(str(i) for i in retrieved or ())[: limits.get(number)], value))
    return out


def _band(score: float | None) -> int:
    """The judge's score as bad (0), middling (1) or good (2); -1 when it has none."""
    return -1 if score is None else min(int(score * len(BANDS)), len(BANDS) - 1)


def _pick(candidates: Sequence[_Candidate], n: int, rng: random.Random) -> list[_Candidate]:
    """Up to ``n`` answers taken in rounds, one from each (score band, trial) stratum per round in a
    shuffled order, so that every band and trial is as even as the answers allow; an answer a trial gave
    word for word like another to the same question is taken once. Returned shuffled: the rows show no
    order of trial or score."""
    strata: dict[tuple[int, int], list[_Candidate]] = {}
    for c in candidates:
        strata.setdefault((_band(c.score), c.trial), []).append(c)
    for stratum in strata.values():
        rng.shuffle(stratum)
    picked: list[_Candidate] = []
    seen: set[tuple[str, str]] = set()
    while len(picked) < n and any(strata.values()):
        order = list(strata)
        rng.shuffle(order)
        for key in order:
            while strata[key] and len(picked) < n:
                c = strata[key].pop()
                if (c.question_id, c.answer) not in seen:
                    seen.add((c.question_id, c.answer))
                    picked.append(c)
                    break
    rng.shuffle(picked)
    return picked


def _chunk_texts(client: MlflowClient, parent: str | None, keys: Iterable[str],
                 rows: Sequence[_Candidate], saved: Path, qdrant: str | None) -> dict[str, dict[str, str]]:
    """Index key -> chunk id -> text of the passages the rows were given, whichever study built the
    index: from the study run's ``chunks/<key>.jsonl`` (read a line at a time: an index's may be a
    gigabyte), else from the index saved in the work dir (``saved/<key>/chunks.json``, beside the Qdrant
    Edge shard, which holds no text), else from the points of the ``qdrant`` server's collection."""
    from mlflow.exceptions import MlflowException

    wanted = {i for r in rows for i in r.retrieved}
    texts: dict[str, dict[str, str]] = {}
    for key in keys:
        found: dict[str, str] = {}
        with tempfile.TemporaryDirectory() as tmp:
            try:
                if parent is None:
                    raise MlflowException("the study has no MLflow run")
                path = Path(client.download_artifacts(parent, f"chunks/{key}.jsonl", tmp))
            except (MlflowException, OSError):  # not logged: read the index instead
                found = _saved_texts(saved, key, wanted)
                missing = sorted(wanted - set(found))
                texts[key] = {**_server_texts(qdrant, saved.parent, key, missing), **found}
                continue
            with path.open(encoding="utf-8") as lines:
                for line in lines:
                    chunk: dict[str, Any] = json.loads(line)
                    if chunk["id"] in wanted:
                        found[chunk["id"]] = str(chunk["text"])
        texts[key] = found
    return texts


def _server_texts(qdrant: str | None, workdir: Path, key: str, wanted: Sequence[str]) -> dict[str, str]:
    """Chunk id -> text of the ``wanted`` chunks that index ``key`` holds on a Qdrant server (none for
    Qdrant Edge, whose shard keeps no text, or a server that cannot be reached: the sheet says which
    answers lack passages)."""
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

    from composer.index import open_index
    from composer.index.client import ClientBackend

    if not wanted or qdrant is None or not qdrant.startswith(("http://", "https://")):
        return {}
    backend = open_index(qdrant, workdir)
    try:
        return backend.texts(key, wanted) if isinstance(backend, ClientBackend) else {}
    except (ResponseHandlingException, UnexpectedResponse, OSError):
        return {}
    finally:
        backend.close()


def _saved_texts(saved: Path, key: str, wanted: set[str]) -> dict[str, str]:
    """Chunk id -> text of the ``wanted`` chunks of the index saved as ``saved/<key>`` (none when it is
    not there, or unreadable)."""
    from composer.pipeline.saved import CHUNKS

    if not plain_name(key):  # the key names a folder
        return {}
    try:
        columns = json.loads((saved / key / CHUNKS).read_bytes())
        pairs = zip(columns["id"], columns["text"], strict=True)
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {str(i): str(t) for i, t in pairs if i in wanted}


def _sheet(study: str, metric: str, picked: Sequence[_Candidate], texts: dict[str, dict[str, str]],
           keys: dict[int, str], experiment_id: str, runs: dict[int, str]) -> LabellingSheet:
    rows, missing = [], 0
    for c in picked:
        known = texts.get(keys.get(c.trial, ""), {})
        contexts = tuple(known[i] for i in c.retrieved if i in known)
        missing += len(contexts) < len(c.retrieved)
        rows.append(SheetRow(f"{c.question_id}@{c.trial}", c.question, c.answer, contexts, c.reference,
                             metric, c.trial, c.score))
    used = {c.trial: runs[c.trial] for c in picked}
    return LabellingSheet(study, metric, rows, experiment_id, dict(sorted(used.items())), missing)
