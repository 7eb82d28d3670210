"""The HTML report of a real study (LLM answers from a local scripted server, questions held out): the
held-out verdict, the trials' confidence intervals, their LLM cost, links to their MLflow runs; every
string escaped; the page and the trial artifacts written with the umask's permissions."""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import pytest
from fake_llm_server import FakeLLMServer
from sample_study import write_sample_study
from scripted_llm import ScriptedRAG, golds_of
from typer.testing import CliRunner

from composer.cli.app import app
from composer.cli.report import DEFAULT_UI_URL, TOP, Link, _held_out_section, _table, ui_base
from composer.cli.ui import ui_command
from composer.files import write_atomic
from composer.record import TrialRecord
from composer.study.experiment import ExperimentConfig, load_experiment
from composer.summary import HeldOut

SPACE = "dimensions:\n  retrieval.mode: {choices: [bm25]}\n  retrieval.k: {type: int, low: 1, high: 20}\n"
EXPERIMENT = """name: r3
corpus: {corpus}
questions: questions.jsonl
search_space: space.yaml
objective: {{k: 5, metrics: {{recall: 1, answer_correctness: 1}}}}
split: {{held_out: 0.3, seed: 0}}
sampler: {{name: random, seed: 0}}
pruner: none
n_trials: 2
mlflow: {{traces: 0}}
workdir: work
llm:
  model: openai/fake
  api_base: {url}
  price: {{input: 1.0, output: 2.0}}
"""


@dataclass
class Ran:
    exp: ExperimentConfig
    exp_file: Path
    study: optuna.Study
    runs: dict[int, str]
    """Trial number -> MLflow run id."""
    parent: str
    experiment_id: str
    umasks: dict[int, int]
    """Trial number -> the umask its run was written under."""
    page: Path
    """The report, written under umask 0o022."""


def _optimize(exp_file: Path, umask: int, *extra: str) -> None:
    previous = os.umask(umask)
    try:
        result = CliRunner().invoke(app, ["optimize", str(exp_file), *extra])
    finally:
        os.umask(previous)
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ran]:
    """Two configurations written under umask 0o022, then one more under 0o077 (the study continued);
    its report written under 0o022."""
    from mlflow import MlflowClient

    root = tmp_path_factory.mktemp("report-round3")
    sample = Path(__file__).resolve().parents[2] / "examples" / "arcd-sample"
    golds = golds_of(sample / "questions.jsonl")
    with FakeLLMServer(ScriptedRAG(golds)) as server:
        exp_file = write_sample_study(root, space=SPACE, experiment=EXPERIMENT.replace("{url}", server.url),
                                      n_questions=16)
        _optimize(exp_file, 0o022)
        exp = load_experiment(exp_file)
        first = {t.number for t in optuna.load_study(study_name="r3", storage=exp.storage_url).trials}
        _optimize(exp_file, 0o077, "--n-trials", "3")
    client = MlflowClient(exp.tracking_uri)
    found = client.get_experiment_by_name(exp.mlflow_experiment)
    assert found is not None
    runs = client.search_runs([found.experiment_id], filter_string="tags.`composer.study` = 'r3'")
    trials = {int(r.data.tags["composer.trial"]): r.info.run_id for r in runs
              if r.data.tags["composer.role"] == "trial"}
    parent = next(r.info.run_id for r in runs if r.data.tags["composer.role"] == "study")
    study = optuna.load_study(study_name="r3", storage=exp.storage_url)
    umasks = {t.number: 0o022 if t.number in first else 0o077 for t in study.trials}
    assert set(umasks.values()) == {0o022, 0o077}
    ran = Ran(exp, exp_file, study, trials, parent, str(found.experiment_id), umasks, root / "page.html")
    _report(ran, ran.page)
    yield ran


def _report(ran: Ran, out: Path, umask: int = 0o022, *extra: str) -> str:
    previous = os.umask(umask)
    try:
        result = CliRunner().invoke(app, ["report", "-e", str(ran.exp_file), "--out", str(out), *extra])
    finally:
        os.umask(previous)
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8")


def _section(page: str, heading: str) -> str:
    return page.split(f"<h2>{heading}")[1].split("<h2>")[0]


@pytest.mark.slow
def test_the_page_gives_the_held_out_verdict_of_the_winner(ran: Ran) -> None:
    held = ran.study.user_attrs["held_out"]
    d = held["difference"]
    verdict = _section(ran.page.read_text(encoding="utf-8"), "Held-out verdict")
    assert f"{held['n_questions']} held-out questions" in verdict
    assert f"#{held['winner']['trial']}" in verdict and f"#{held['runner_up']['trial']}" in verdict
    assert f"{held['winner']['held_out_composite']:.4f}" in verdict
    assert f"{d['mean']:+.4f}, 95% CI [{d['ci95'][0]:+.4f}, {d['ci95'][1]:+.4f}]" in verdict
    typed = HeldOut.from_dict(held)
    assert typed is not None and typed.difference is not None
    assert f"Winner really better: <strong>{typed.difference.verdict}</strong>" in verdict


@pytest.mark.slow
def test_the_page_gives_the_bootstrap_intervals_of_the_best_trials(ran: Ran, tmp_path: Path) -> None:
    from mlflow import MlflowClient

    intervals = _section(ran.page.read_text(encoding="utf-8"), "95% bootstrap confidence intervals")
    best = int(ran.study.user_attrs["held_out"]["winner"]["trial"])
    client = MlflowClient(ran.exp.tracking_uri)
    path = Path(client.download_artifacts(ran.runs[best], "summary.json", str(tmp_path)))
    summary = json.loads(path.read_text(encoding="utf-8"))
    for metric in ran.study.user_attrs["objective_weights"]:  # recall@5, token_f1
        low, high = summary["ci"][metric]
        assert f"<th>{metric}</th>" in intervals
        assert f"{summary['metrics'][metric]:.4f} [{low:.4f}, {high:.4f}]" in intervals
    ran_itself = [t for t in ran.study.trials
                  if t.state.name == "COMPLETE" and TrialRecord.of(t).duplicate_of is None]  # type: ignore[union-attr]
    assert intervals.count("<tr>") == 1 + min(len(ran_itself), TOP)  # the header, then the best trials


@pytest.mark.slow
def test_the_page_gives_each_trials_llm_cost_and_tokens_and_the_totals(ran: Ran) -> None:
    page = ran.page.read_text(encoding="utf-8")
    board = _section(page, "Leaderboard")
    header = board.split("</tr>")[0]
    assert header.endswith("<th>LLM cost (USD)</th><th>LLM input tokens</th><th>LLM output tokens</th>")
    assert "<th>context tokens</th>" in header and "llm_cost_usd" not in header
    weighted = ran.study.user_attrs["objective_weights"]
    assert list(weighted) == ["recall@5", "answer_correctness"]  # judged: the default judge is on
    assert "".join(f"<th>{m}</th>" for m in ["composite", *weighted]) in header
    assert "token_f1" not in header and "faithfulness_overlap" not in header
    body = board.split("<tbody>")[1].split("</tbody>")[0]
    *trials, last = body.split("<tr>")[1:]
    rows = {int(row.split("</a>")[0].rpartition(">")[2]): row for row in trials}
    assert set(rows) == set(ran.runs)
    usage = {t.number: TrialRecord.of(t).llm_usage for t in ran.study.trials}  # type: ignore[union-attr]

    def cells(used: Any) -> str:  # none for a repeat, answered by an earlier trial
        if not used:
            return "<td></td>" * 3
        return (f"<td>{used['llm_cost_usd']:.6f}</td><td>{used['llm_prompt_tokens']:.0f}</td>"
                f"<td>{used['llm_completion_tokens']:.0f}</td>")

    for number, row in rows.items():
        assert row.endswith(cells(usage[number]) + "</tr>\n"), row
    totals = {key: sum(u.get(key, 0.0) for u in usage.values())
              for key in ("llm_cost_usd", "llm_prompt_tokens", "llm_completion_tokens")}
    assert totals["llm_cost_usd"] > 0 and totals["llm_prompt_tokens"] > totals["llm_completion_tokens"] > 0
    assert last.startswith("<td>total</td>") and last.endswith(cells(totals) + "</tr>\n")
    assert f"LLM cost: ${totals['llm_cost_usd']:.4f} over all trials" in page


@pytest.mark.slow
def test_the_page_links_the_study_and_every_trial_to_its_mlflow_run(ran: Ran, tmp_path: Path) -> None:
    page = ran.page.read_text(encoding="utf-8")
    runs = f"{DEFAULT_UI_URL}/#/experiments/{ran.experiment_id}/runs/"
    assert f'<a href="{runs}{ran.parent}">the study&#x27;s run</a>' in page
    board = _section(page, "Leaderboard")
    for number, run_id in ran.runs.items():
        assert f'<td><a href="{runs}{run_id}">{number}</a></td>' in board
    elsewhere = _report(ran, tmp_path / "other.html", 0o022, "--ui-url", "https://mlflow.example:8443/team/")
    team = f"https://mlflow.example:8443/team/#/experiments/{ran.experiment_id}/runs/"
    assert f'href="{team}{ran.parent}"' in elsewhere and f'href="{team}{ran.runs[0]}"' in elsewhere
    assert "<script" not in page and 'src="http' not in page  # links only: nothing is fetched


@pytest.mark.slow
def test_a_ui_url_that_is_no_web_address_is_refused(ran: Ran, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["report", "-e", str(ran.exp_file), "--out", str(tmp_path / "p.html"),
                                      "--ui-url", "javascript:alert(1)"])
    assert result.exit_code == 2
    assert "--ui-url" in result.output and "not an http(s) URL" in result.output
    assert not (tmp_path / "p.html").exists()


def test_the_default_ui_url_is_where_composer_ui_serves_by_default() -> None:
    defaults = {name: p.default.default for name, p in inspect.signature(ui_command).parameters.items()}
    assert f"http://{defaults['host']}:{defaults['port']}" == DEFAULT_UI_URL


def test_links_to_a_tracking_server_go_to_the_server_without_its_credentials() -> None:
    assert ui_base("https://me:pw@mlflow.example/base/?token=x", None) == "https://mlflow.example/base"
    assert ui_base("sqlite:///work/mlflow.db", None) == DEFAULT_UI_URL
    assert ui_base("https://me:pw@mlflow.example", "http://ui.example:8080/") == "http://ui.example:8080"


@pytest.mark.slow
@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600)])
def test_the_page_and_the_trial_artifacts_follow_the_umask(
    ran: Ran, tmp_path: Path, umask: int, mode: int
) -> None:
    page = tmp_path / "page.html"
    _report(ran, page, umask)
    assert page.stat().st_mode & 0o777 == mode
    artifacts = ran.exp.work_dir / "mlartifacts"
    names = []
    for number in (n for n, written in ran.umasks.items() if written == umask and n in ran.runs):
        files = list(artifacts.glob(f"*/{ran.runs[number]}/artifacts/*"))
        assert files and {f.stat().st_mode & 0o777 for f in files} == {mode}, number
        names += [f.name for f in files]
    assert {"summary.json", "questions.json", "config.yaml"} <= set(names)


@pytest.mark.parametrize(("umask", "private", "mode"),
                         [(0o022, False, 0o644), (0o002, False, 0o664), (0o077, False, 0o600),
                          (0o022, True, 0o600)])
def test_write_atomic_gives_the_umasks_mode_or_a_private_one(
    tmp_path: Path, umask: int, private: bool, mode: int
) -> None:
    previous = os.umask(umask)
    try:
        write_atomic(tmp_path / "f.txt", "x", private=private)
        write_atomic(tmp_path / "f.txt", "y", private=private)  # replacing an existing file
    finally:
        os.umask(previous)
    assert (tmp_path / "f.txt").stat().st_mode & 0o777 == mode
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_every_cell_header_and_link_is_escaped() -> None:
    page = _table(["<th>"], [["<b>x</b>", Link('https://h/?a="1"&b=<2>', "<i>run</i>"), None, 0.5]])
    assert "<b>" not in page and "<i>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert '<a href="https://h/?a=&quot;1&quot;&amp;b=&lt;2&gt;">&lt;i&gt;run&lt;/i&gt;</a>' in page
    assert "<td></td><td>0.5000</td>" in page and "&lt;th&gt;" in page


def test_the_held_out_section_escapes_its_error_and_says_when_there_is_no_split() -> None:
    failed: dict[str, Any] = {"n_questions": 6, "error": "re-scoring trial #1 failed: <script>x</script>"}
    section = _held_out_section(failed, split=True, winner=True)
    assert "<script>" not in section and "&lt;script&gt;" in section and "6 held-out questions" in section
    assert "no <code>split:</code>" in _held_out_section(None, split=False, winner=True)
    assert "stopped before" in _held_out_section(None, split=True, winner=True)
    assert "no trial completed" in _held_out_section(None, split=True, winner=False)


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600)])
def test_the_mlflow_store_composer_creates_follows_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    """The local MLflow store is made the way MLflow would make it, not with a temporary file's 0600."""
    from composer.mlflow_store import prepare_mlflow_store
    from composer.store import sqlite_url

    store = tmp_path / "mlflow.db"
    previous = os.umask(umask)
    try:
        prepare_mlflow_store(sqlite_url(store, mlflow=True))
    finally:
        os.umask(previous)
    assert store.stat().st_mode & 0o777 == mode
