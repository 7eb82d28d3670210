"""`composer synth` on the command line: the set it writes scores in `composer eval`, the report, the review
table, MLflow, and bad input or a dead provider as one line with exit 2 and no file written."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import FakeLLMServer, server_error
from scripted_synth import ScriptedSynth
from typer.testing import CliRunner

from composer.cli.app import app
from composer.data import load_corpus, load_questions

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arcd-sample" / "corpus.jsonl"
N = 10


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("synth-cli") / "corpus.jsonl"
    path.write_text(
        "".join(EXAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)[:24]), encoding="utf-8"
    )
    return path


@pytest.fixture()
def server(corpus_file: Path) -> Iterator[FakeLLMServer]:
    with FakeLLMServer(ScriptedSynth(load_corpus(corpus_file))) as srv:
        yield srv


def synth(server: FakeLLMServer, corpus: Path, tmp_path: Path, *extra: str) -> Any:
    """Run `composer synth` in a wide terminal (the review table folds long cells in a narrow one)."""
    args = [
        "synth",
        str(corpus),
        "--n",
        str(N),
        "--llm",
        "openai/writer",
        "--llm-base",
        server.url,
        "--out",
        str(tmp_path / "questions.jsonl"),
        "--workdir",
        str(tmp_path / "work"),
        "--retries",
        "1",
        *extra,
    ]
    return CliRunner().invoke(app, args, env={"COLUMNS": "240"})


def test_the_written_set_loads_cleanly_and_scores_in_composer_eval(
    server: FakeLLMServer, corpus_file: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    result = synth(server, corpus_file, tmp_path)
    assert result.exit_code == 0, result.output
    assert f"kept {N} of {N} questions" in result.output and "dropped:" in result.output
    out = tmp_path / "questions.jsonl"
    report = json.loads((tmp_path / "questions.report.json").read_text(encoding="utf-8"))
    assert (
        report["kept"] == N
        and report["out"] == str(out)
        and report["settings"]["llm"]["model"] == "openai/writer"
    )
    assert report["llm"]["llm_requests"] == server.chat_requests
    corpus = load_corpus(corpus_file)
    with caplog.at_level(logging.WARNING):
        questions = load_questions(out, corpus=corpus, strict=True)
    assert len(questions) == N and not caplog.records
    unanswerable = sum(q.metadata["kind"] == "unanswerable" for q in questions)
    assert unanswerable == 1

    config = tmp_path / "pipeline.yaml"
    config.write_text("retrieval: {mode: bm25, k: 5}\n", encoding="utf-8")
    scored = CliRunner().invoke(
        app,
        [
            "eval",
            str(out),
            "--corpus",
            str(corpus_file),
            "--config",
            str(config),
            "--workdir",
            str(tmp_path / "work"),
            "--json",
        ],
    )
    assert scored.exit_code == 0, scored.output
    summary = json.loads(scored.stdout)
    assert summary["n_questions"] == N
    assert summary["skipped"]["no_labels"] == unanswerable  # no gold: retrieval leaves it out, counted
    assert 0.0 < summary["metrics"]["recall@5"] <= 1.0  # BM25 finds the source documents of most questions


def test_a_rerun_replays_from_the_cache_and_json_prints_the_report_alone(
    server: FakeLLMServer, corpus_file: Path, tmp_path: Path
) -> None:
    assert synth(server, corpus_file, tmp_path).exit_code == 0
    first = (tmp_path / "questions.jsonl").read_bytes()
    sent = server.chat_requests
    again = synth(server, corpus_file, tmp_path, "--json")
    assert again.exit_code == 0, again.output
    report = json.loads(again.stdout)
    assert server.chat_requests == sent and report["llm"]["llm_requests"] == 0
    assert report["llm"]["llm_cached_calls"] == report["llm"]["llm_calls"] > 0
    assert (tmp_path / "questions.jsonl").read_bytes() == first


def test_review_prints_a_sample_of_every_kind(
    server: FakeLLMServer, corpus_file: Path, tmp_path: Path
) -> None:
    result = synth(server, corpus_file, tmp_path, "--review", "--report", str(tmp_path / "r.json"))
    assert result.exit_code == 0, result.output
    assert "generated questions" in result.output
    for kind in ("factoid", "conceptual", "multi_hop", "unanswerable"):
        assert kind in result.output
    assert "(unanswerable)" in result.output and (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (("--mix", "factoid=1,trivia=1"), "error: field 'mix': unknown kind 'trivia'"),
        (("--mix", "factoid=-1"), "error: field 'mix': weights must be finite numbers >= 0"),
        (("--mix", "factoid"), "error: field 'mix': expected KIND=WEIGHT"),
        (("--lang", "de"), "error: command line (field 'lang'): Input should be 'auto', 'ar', 'fa' or 'en'"),
        (("--api-key-env", "sk-123-abc"), "error: command line (field 'api_key_env'): must name"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(
    server: FakeLLMServer, corpus_file: Path, tmp_path: Path, extra: tuple[str, ...], expected: str
) -> None:
    result = synth(server, corpus_file, tmp_path, *extra)
    assert result.exit_code == 2 and result.output.startswith(expected), result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert server.chat_requests == 0 and not (tmp_path / "questions.jsonl").exists()


def test_a_missing_or_bad_corpus_is_one_line_and_exit_2(server: FakeLLMServer, tmp_path: Path) -> None:
    missing = synth(server, tmp_path / "nope.jsonl", tmp_path)
    assert missing.exit_code == 2 and missing.output.startswith("error: ") and "nope.jsonl" in missing.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "d1", "text": "fine"}\n{"id": "d2", "text": \n', encoding="utf-8")
    result = synth(server, bad, tmp_path)
    assert result.exit_code == 2 and result.output.startswith("error: ") and "bad.jsonl:2" in result.output
    short = tmp_path / "short.jsonl"
    short.write_text('{"id": "d1", "text": "Too short to ask about."}\n', encoding="utf-8")
    result = synth(server, short, tmp_path)
    assert result.exit_code == 2 and "no document has a passage of at least 150 characters" in result.output
    assert server.chat_requests == 0


def test_a_dead_provider_writes_nothing_and_says_why(
    server: FakeLLMServer, corpus_file: Path, tmp_path: Path
) -> None:
    (tmp_path / "questions.jsonl").write_text("an older set\n", encoding="utf-8")
    server.route = lambda req: server_error(500)
    result = synth(server, corpus_file, tmp_path)
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "no question was kept" in result.output and "server_error" in result.output
    assert (tmp_path / "questions.jsonl").read_text(encoding="utf-8") == "an older set\n"  # untouched
    assert not (tmp_path / "questions.report.json").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_the_report_lands_in_mlflow(server: FakeLLMServer, corpus_file: Path, tmp_path: Path) -> None:
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = synth(
        server, corpus_file, tmp_path, "--tracking-uri", uri, "--mlflow-experiment", "synth-test", "--json"
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    client = MlflowClient(uri)
    run = client.get_run(report["mlflow_run_id"])
    assert run.data.metrics["kept"] == N and run.data.metrics["dropped_near_duplicate"] >= 0
    assert run.data.params["seed"] == "0" and run.data.params["llm.model"] == "openai/writer"
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {
        "synth_report.json",
        "questions.jsonl",
    }


@pytest.mark.slow
def test_an_experiment_with_a_corpus_only_generates_its_set_once_and_holds_some_out(
    server: FakeLLMServer, corpus_file: Path, tmp_path: Path
) -> None:
    """`synth:` in place of `questions:`: the set is generated (its report a `synth-0` run in MLflow),
    cached by corpus and settings, 30% held out, and the study runs; running again sends no request."""
    from mlflow import MlflowClient

    (tmp_path / "space.yaml").write_text(
        "dimensions:\n  retrieval.mode: {choices: [bm25]}\n  retrieval.k: {choices: [3, 5]}\n",
        encoding="utf-8",
    )
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text(
        f"name: generated\ncorpus: {corpus_file}\nsearch_space: space.yaml\nn_trials: 2\nworkdir: work\n"
        f"synth: {{n: {N}, llm: {{model: openai/writer, api_base: '{server.url}', max_retries: 1}}}}\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(app, ["optimize", str(experiment)])
    assert result.exit_code == 0, result.output
    assert f"{N - 3} questions (+3 held out)" in result.output
    [cached] = (tmp_path / "work" / "cache" / "synth").glob("*.jsonl")
    assert len(load_questions(cached, corpus=load_corpus(corpus_file))) == N
    client = MlflowClient(f"sqlite:///{tmp_path / 'work' / 'mlflow.db'}")
    found = client.get_experiment_by_name("generated")
    assert found is not None
    synth_runs = client.search_runs([found.experiment_id], "tags.`composer.kind` = 'synth'")
    assert [r.info.run_name for r in synth_runs] == ["synth-0"]
    assert synth_runs[0].data.metrics["kept"] == N

    requests = server.chat_requests
    again = CliRunner().invoke(app, ["optimize", str(experiment), "--n-trials", "3"])
    assert again.exit_code == 0, again.output
    assert server.chat_requests == requests  # the set came from the cache
    assert len(client.search_runs([found.experiment_id], "tags.`composer.kind` = 'synth'")) == 1


def test_an_experiment_needs_questions_or_synth(tmp_path: Path) -> None:
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text("name: x\ncorpus: c.jsonl\nsearch_space: s.yaml\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["optimize", str(experiment)])
    assert result.exit_code == 2
    assert "give questions (a file) or synth (generate them), one of the two" in result.output
