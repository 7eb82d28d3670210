"""A real study end to end: the real Pipeline (BM25 on Qdrant Edge), SQLite Optuna storage and a local
MLflow store, checked through Optuna's and MLflow's own APIs; pruning, repeats, held-out re-scoring,
export and `composer eval` reproducing the exported trial."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from sample_study import write_experiment
from typer.testing import CliRunner

from composer.cli.app import app
from composer.data import load_questions
from composer.evaluation.splits import split_questions
from composer.record import TrialRecord
from composer.study._storage import make_storage
from composer.study.experiment import ExperimentConfig, load_experiment

pytestmark = pytest.mark.slow  # every test reads one whole study (5 configurations, 60 questions)

SECRET = "s3cr3t-pw"
DEFAULTS = {"embedding": {"api_base": f"https://user:{SECRET}@llm.example/v1"}}
DIMS = {"retrieval.mode": {"choices": ["bm25"]}, "chunking.method": {"choices": ["paragraph", "sentence"]},
        "retrieval.k": {"choices": [1, 5, 10]}}
# Enqueued first: a good config, a poor one (k=1 caps recall@5 at recall@1: pruned), the good one again.
ENQUEUED = [
    {"retrieval.mode": "bm25", "chunking.method": "paragraph", "retrieval.k": 10},
    {"retrieval.mode": "bm25", "chunking.method": "paragraph", "retrieval.k": 1},
    {"retrieval.mode": "bm25", "chunking.method": "paragraph", "retrieval.k": 10},
]


@dataclass
class Finished:
    root: Path
    exp_file: Path
    exp: ExperimentConfig
    study: optuna.Study
    output: str
    seconds: float


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Finished:
    root = tmp_path_factory.mktemp("study")
    exp_file = write_experiment(
        root, dims=DIMS, defaults=DEFAULTS, n_questions=60, name="e2e", objective={"k": 5},
        sampler={"name": "tpe", "seed": 0, "n_startup_trials": 2},
        pruner={"name": "median", "n_startup_trials": 1, "n_warmup_steps": 0}, n_trials=5, batch_size=15,
        split={"held_out": 0.25, "seed": 0}, mlflow={"traces": 3})
    exp = load_experiment(exp_file)
    pre = optuna.create_study(storage=make_storage(exp.storage_url), study_name="e2e", direction="maximize")
    for params in ENQUEUED:
        pre.enqueue_trial(params)
    started = time.monotonic()
    result = CliRunner().invoke(app, ["optimize", str(exp_file)])
    seconds = time.monotonic() - started
    assert result.exit_code == 0, result.output
    study = optuna.load_study(study_name="e2e", storage=exp.storage_url)
    return Finished(root, exp_file, exp, study, result.output, seconds)


def mlflow_client(f: Finished) -> Any:
    from mlflow import MlflowClient

    return MlflowClient(f.exp.tracking_uri)


def trial_runs(f: Finished) -> dict[int, Any]:
    client = mlflow_client(f)
    experiment = client.get_experiment_by_name("e2e")
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.`composer.role` = 'trial'")
    by_trial = {int(r.data.tags["composer.trial"]): r for r in runs}
    assert len(by_trial) == len(runs)  # one run per trial
    return by_trial


def test_trials_complete_prune_and_repeat(finished: Finished) -> None:
    trials = finished.study.trials
    states = [t.state.name for t in trials]
    assert states[:3] == ["COMPLETE", "PRUNED", "COMPLETE"]
    finished_trials = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED")]
    records = {t.number: record for t in trials if (record := TrialRecord.of(t)) is not None}
    distinct = [t for t in finished_trials if records[t.number].duplicate_of is None]
    assert len(distinct) == 5  # n_trials counts distinct configurations: repeats do not use up a slot
    assert len({records[t.number].config_hash for t in distinct}) == 5
    assert len(finished_trials) <= 2 * 5  # within the repeat allowance
    assert records[1].metrics["pruned_at_questions"] == 15 and list(trials[1].intermediate_values) == [0]
    assert records[2].duplicate_of == 0 and trials[2].value == trials[0].value
    assert sorted(trials[0].intermediate_values) == [0, 1, 2]  # 45 selection questions in batches of 15
    assert "study e2e" in finished.output and "best: trial #" in finished.output
    print(f"\nstudy of 5 configurations (45 + 15 questions): {finished.seconds:.1f} s")


def test_mlflow_parent_and_one_nested_run_per_trial(finished: Finished) -> None:
    client = mlflow_client(finished)
    experiment = client.get_experiment_by_name("e2e")
    parents = client.search_runs([experiment.experiment_id], filter_string="tags.`composer.role` = 'study'")
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED" and parent.data.tags["composer.study"] == "e2e"
    assert parent.data.metrics["COMPLETE"] >= 2 and parent.data.metrics["PRUNED"] >= 1
    parent_files = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"study_summary.json", "leaderboard.csv", "best_config.yaml", "plots"} <= parent_files
    plots = {Path(a.path).name for a in client.list_artifacts(parent.info.run_id, "plots")}
    assert "optimization_history.png" in plots  # importances: not from 2 or 3 complete trials (_report)

    runs = trial_runs(finished)
    assert set(runs) == {t.number for t in finished.study.trials}
    for t in finished.study.trials:
        run = runs[t.number]
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.data.tags["composer.state"] == t.state.name
        assert run.data.params["chunking.method"] == t.params["chunking.method"]
        assert run.data.params["retrieval.k"] == str(t.params["retrieval.k"])
    pruned = runs[1]
    assert pruned.info.status == "KILLED" and pruned.data.tags["composer.state"] == "PRUNED"
    assert runs[2].data.tags["composer.duplicate_of"] == "0"
    assert runs[2].data.tags["composer.duplicate_of_run"] == runs[0].info.run_id  # points at the original

    full = runs[0]
    assert full.info.status == "FINISHED"
    assert full.data.tags["composer.index_key"].startswith("composer-")
    for name in ("recall_at_5", "ndcg_at_10", "hit_rate_at_1", "mrr_at_3", "precision_at_5", "token_f1",
                 "faithfulness_overlap", "composite", "latency_ms", "context_tokens"):
        assert name in full.data.metrics, name
    assert full.data.metrics["composite"] == pytest.approx(finished.study.trials[0].value)
    assert len(client.get_metric_history(full.info.run_id, "running_composite")) == 3
    assert len(client.get_metric_history(pruned.info.run_id, "running_composite")) == 1
    # A pruned trial's running composite over 15 questions is not ranked beside complete trials.
    assert "composite" not in pruned.data.metrics
    assert pruned.data.metrics["composite_at_prune"] == finished.study.trials[1].intermediate_values[0]
    assert pruned.data.metrics["pruned_at_questions"] == 15
    files = {a.path for a in client.list_artifacts(full.info.run_id)}
    assert {"summary.json", "samples.csv", "traces.jsonl", "error_rates.json", "config.yaml"} <= files
    local = Path(client.download_artifacts(full.info.run_id, "samples.csv"))
    assert len(list(csv.DictReader(io.StringIO(local.read_text(encoding="utf-8"))))) == 45
    # The pruned trial logs its report so far: the 15 questions it was scored on.
    files = {a.path for a in client.list_artifacts(pruned.info.run_id)}
    assert {"summary.json", "samples.csv", "traces.jsonl", "error_rates.json", "config.yaml"} <= files
    traces = Path(client.download_artifacts(pruned.info.run_id, "traces.jsonl")).read_text(encoding="utf-8")
    assert len(traces.splitlines()) == 15
    # Chunk texts are logged once per index under the parent run; trial traces name chunks by id.
    key = full.data.tags["composer.index_key"]
    chunks = Path(client.download_artifacts(parent.info.run_id, f"chunks/{key}.jsonl")).read_text(
        encoding="utf-8")
    texts = {row["id"]: row["text"] for row in map(json.loads, chunks.splitlines())}
    first = json.loads(Path(client.download_artifacts(full.info.run_id, "traces.jsonl")).read_text(
        encoding="utf-8").splitlines()[0])
    assert first["retrieved"] and all(hit["id"] in texts and "text" not in hit for hit in first["retrieved"])


def test_per_question_traces_with_their_spans(finished: Finished) -> None:
    import mlflow

    mlflow.set_tracking_uri(finished.exp.tracking_uri)
    experiment = mlflow_client(finished).get_experiment_by_name("e2e")
    run_id = trial_runs(finished)[0].info.run_id
    traces = mlflow.search_traces(locations=[experiment.experiment_id], run_id=run_id, return_type="list")
    assert len(traces) == 3
    names = {span.name for span in traces[0].data.spans}
    assert {"question", "retrieve", "generate", "judge"} <= names
    judge = next(s for s in traces[0].data.spans if s.name == "judge")
    assert "recall@5" in judge.outputs


SCAN = """
import pathlib, sys
root, secret = pathlib.Path(sys.argv[1]), sys.argv[2].encode()
files = [p for p in root.rglob("*") if p.is_file() and not p.name.startswith("optuna.db")]
print(len(files), *(p for p in files if secret in p.read_bytes()))
"""


def test_no_secret_reaches_mlflow(finished: Finished) -> None:
    # Read in another process: closing a descriptor of a SQLite file drops every POSIX lock this process
    # holds on it (MLflow's pooled connections' too), and the next writer would then delete the WAL under
    # them, leaving this module's later reads on a stale copy of the store.
    scanned, *holding = subprocess.run(
        [sys.executable, "-c", SCAN, str(finished.root / ".composer"), SECRET],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout.split()
    assert int(scanned) > 10 and holding == []
    param = trial_runs(finished)[0].data.params["embedding.api_base"]
    assert param == "https://***@llm.example/v1"


def test_summary_reports_held_out_and_index_reuse(finished: Finished) -> None:
    client = mlflow_client(finished)
    experiment = client.get_experiment_by_name("e2e")
    parent = client.search_runs([experiment.experiment_id], filter_string="tags.`composer.role` = 'study'")[0]
    summary_file = Path(client.download_artifacts(parent.info.run_id, "study_summary.json"))
    summary = json.loads(summary_file.read_text(encoding="utf-8"))
    held = summary["held_out"]
    assert held["n_questions"] == 15
    assert held["winner"]["trial"] == summary["best_trial"]
    if "runner_up" in held:
        low, high = held["difference"]["ci95"]
        assert low <= held["difference"]["mean"] <= high
        assert held["difference"]["winner_really_better"] == (low > 0)
        assert held["difference"]["runner_up_really_better"] == (high < 0)
    encode = summary["encode"]
    assert encode["unique_index_keys"] <= 2 and encode["index_builds"] == encode["unique_index_keys"]
    assert encode["repeats_skipped"] >= 1 and encode["encode_passes"] == 0  # BM25 encodes nothing
    assert summary["objective"]["weights"] == {"recall@5": 0.25, "ndcg@5": 0.25, "token_f1": 0.25,
                                               "faithfulness_overlap": 0.25}
    board = list(csv.DictReader(io.StringIO(
        Path(client.download_artifacts(parent.info.run_id, "leaderboard.csv")).read_text(encoding="utf-8"))))
    assert int(board[0]["trial"]) == summary["best_trial"]


def test_trials_command_prints_the_leaderboard(finished: Finished) -> None:
    result = CliRunner().invoke(app, ["trials", "-e", str(finished.exp_file), "--csv"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.output)))
    assert len(rows) == len(finished.study.trials)
    best = max((t for t in finished.study.trials if t.state.name == "COMPLETE"), key=lambda t: t.value or 0)
    assert float(rows[0]["composite"]) == pytest.approx(best.value)
    missing = CliRunner().invoke(app, ["trials", "nope", "-e", str(finished.exp_file)])
    assert missing.exit_code == 2 and "no study 'nope'" in missing.output


def test_export_then_eval_reproduces_the_trials_metrics(finished: Finished, tmp_path: Path) -> None:
    out = tmp_path / "best.yaml"
    result = CliRunner().invoke(app, ["export", "-e", str(finished.exp_file), "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load(out.read_text(encoding="utf-8"))
    prov = doc["provenance"]
    best = max((t for t in finished.study.trials if t.state.name == "COMPLETE"), key=lambda t: t.value or 0)
    assert prov["study"] == "e2e" and doc["scores"]["composite"] == pytest.approx(best.value)
    assert prov["trial"] in {t.number for t in finished.study.trials if t.value == best.value}
    assert prov["corpus_fingerprint"] and prov["selection_fingerprint"] and prov["composer_version"]
    assert doc["pipeline"]["retrieval"]["mode"] == "bm25"

    # The trial was scored on the selection split: score exactly those questions again.
    selection, _ = split_questions(load_questions(finished.exp.questions), finished.exp.split)
    sel_file = tmp_path / "selection.jsonl"
    rows = [{"id": q.id, "question": q.question, "relevant_ids": list(q.relevant_ids)} for q in selection]
    sel_file.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    result = CliRunner().invoke(app, ["eval", str(sel_file), "--corpus", str(finished.exp.corpus), "--config",
                                      str(out), "--workdir", str(tmp_path / "fresh"), "--json"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout)["metrics"]
    for name in ("recall@5", "ndcg@5", "mrr@10", "hit_rate@1", "precision@3"):
        assert metrics[name] == pytest.approx(doc["scores"][name], abs=1e-12), name


def test_export_as_a_runnable_script(finished: Finished, tmp_path: Path) -> None:
    script = tmp_path / "best.py"
    result = CliRunner().invoke(app, ["export", "e2e", "--storage", finished.exp.storage_url,
                                      "--out", str(script), "--format", "python"])
    assert result.exit_code == 0, result.output
    run = subprocess.run([sys.executable, str(script), str(finished.exp.corpus), "من هو جمال خاشقجي؟"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert run.returncode == 0, run.stderr
    assert "answer:" in run.stdout and "arcd-000-" in run.stdout


def test_export_refuses_a_trial_that_did_not_complete(finished: Finished, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["export", "-e", str(finished.exp_file), "--trial", "1",
                                      "--out", str(tmp_path / "x.yaml")])
    assert result.exit_code == 2 and "did not complete (PRUNED)" in result.output


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def ui_process(finished: Finished, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int, Path]]:
    port = free_port()
    command = [str(Path(sys.executable).parent / "composer"), "ui", "-e", str(finished.exp_file),
               "--port", str(port)]
    log = tmp_path / "ui.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc, port, log
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the group: composer ui and the MLflow server it started
        proc.wait(timeout=30)


def test_ui_serves_the_store_on_localhost(ui_process: tuple[subprocess.Popen[bytes], int, Path]) -> None:
    proc, port, log = ui_process
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                assert response.status == 200
                break
        except OSError:
            assert proc.poll() is None, "mlflow ui exited"
            assert time.monotonic() < deadline, "mlflow ui did not start"
            time.sleep(0.5)
    url = f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/get-by-name?experiment_name=e2e"
    body = json.loads(urllib.request.urlopen(url, timeout=10).read())
    assert body["experiment"]["name"] == "e2e"
    assert f"http://127.0.0.1:{port}" in log.read_text(encoding="utf-8")


def test_several_objectives_use_nsga2_and_report_the_pareto_front(finished: Finished) -> None:
    from rich.console import Console

    from composer.objective import ObjectiveConfig
    from composer.study.experiment import MlflowConfig
    from composer.study.study import run_study

    exp = finished.exp.model_copy(update={
        "name": "e2e-multi", "objective": ObjectiveConfig(k=5, secondary=["context_tokens"]), "n_trials": 4,
        "split": None, "mlflow": MlflowConfig(traces=0),
    })
    result = run_study(exp, console=Console(file=io.StringIO()))
    study = optuna.load_study(study_name="e2e-multi", storage=exp.storage_url)
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    # n_trials counts distinct configurations: one the sampler proposes again is answered from the
    # trial it repeats, and the study runs one more.
    ran = [t for t in complete if (r := TrialRecord.of(t)) is not None and r.duplicate_of is None]
    assert len(ran) == 4 and all(len(t.values) == 2 for t in complete)
    assert all(not t.intermediate_values for t in complete)  # Optuna prunes single objectives only
    front = result.summary.pareto_front
    assert front and set(front) == {t.number for t in study.best_trials}
    assert front is not None and result.summary.best_trial in front  # the best composite is never dominated
    client = mlflow_client(finished)
    plots = {Path(a.path).name for a in client.list_artifacts(result.parent_run_id, "plots")}
    assert "pareto_front.png" in plots
