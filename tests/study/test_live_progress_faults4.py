"""Progress inside a trial (issue 42): a 9-minute trial on a local LLM printed nothing. The live view's
status line shows the running trial's questions retrieved, answered and judged, its LLM requests so far,
in flight and failed, its rate and the time it has left, and they move as the trial goes; without a
terminal (a CI log) the same line is logged with -v, at most every ``log_every`` seconds."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import io
import logging
from pathlib import Path

import pytest
from fake_llm_server import FakeLLMServer
from rich.console import Console
from sample_study import write_experiment, write_questions
from scripted_llm import ScriptedRAG
from typer.testing import CliRunner

from composer.cli.app import app
from composer.data import load_questions
from composer.llm import Usage
from composer.llm.usage import sending
from composer.study import live
from composer.study.live import StudyProgress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(live.time, "monotonic", clock)
    return clock


def _shown(progress: StudyProgress) -> str:
    console = Console(record=True, width=300, force_terminal=True)
    console.print(progress)
    return console.export_text()


def test_the_status_line_shows_the_running_trial_and_its_figures_move(clock: Clock) -> None:
    progress = StudyProgress(Console(file=io.StringIO(), force_terminal=True), target=3, done=1)
    usage = Usage()
    progress.watch(4, usage)
    assert "trial #4" in _shown(progress)
    clock.now = 120.0
    progress.stage("retrieved", 40, 40)
    progress.stage("answered", 10, 40)
    for _ in range(5):
        usage.record_request(100, 10, 0.0)
    usage.record_failed_attempt("bad_response")
    with sending([usage]), sending([usage]):
        first = _shown(progress)
    assert "trial 1/3" in first and "trial #4: retrieved 40/40, answered 10/40" in first
    assert "LLM 6 requests, 2 in flight, 1 failed" in first
    assert "0.50 questions/s · about 0:01:00 left" in first  # 10 questions in 20 s, 30 to go

    clock.now = 140.0
    progress.stage("answered", 30, 40)
    progress.stage("judged", 20, 40)
    usage.record_failed_attempt("timeout")
    later = _shown(progress)
    assert "answered 30/40, judged 20/40" in later
    assert "LLM 7 requests, 0 in flight, 2 failed" in later
    assert "0.50 questions/s · about 0:00:40 left" in later  # judged: 20 in 40 s, 20 to go


def test_without_a_terminal_the_progress_is_logged_at_most_every_log_every_seconds(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    progress = StudyProgress(Console(file=io.StringIO()), target=2, done=0)
    progress.log_every = 10.0
    progress.watch(0, Usage())
    with caplog.at_level(logging.INFO, logger="composer.study.live"):
        for now, done in ((101.0, 4), (105.0, 8), (112.0, 12)):
            clock.now = now
            progress.stage("answered", done, 20)
    lines = [r.getMessage() for r in caplog.records if r.name == "composer.study.live"]
    assert len(lines) == 2
    assert lines[0].startswith("trial #0: answered 4/20") and "answered 12/20" in lines[1]


def test_a_study_run_without_a_terminal_logs_its_trials_progress_with_v(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live, "LOG_EVERY_S", 0.0)
    golds = {q.question: q.gold_answers[0] for q in load_questions(write_questions(tmp_path, 6))}
    with FakeLLMServer(ScriptedRAG(golds)) as srv:
        exp = write_experiment(
            tmp_path, n_questions=6, defaults={"retrieval": {"mode": "bm25", "k": 3}},
            dims={"generation.template": {"choices": ["concise"]}}, n_trials=1, batch_size=3,
            objective={"k": 3, "metrics": {"recall": 1, "answer_correctness": 1}},
            judge={"metrics": ["answer_correctness"]},
            llm={"model": "openai/smol", "api_base": srv.url, "price": {"input": 0.0, "output": 0.0}},
        )
        done = CliRunner().invoke(app, ["-v", "optimize", str(exp)])
    assert done.exit_code == 0, done.output
    assert "trial #0: retrieved 3/6" in done.output
    assert "answered 6/6" in done.output and "judged 6/6" in done.output
    assert "LLM " in done.output and " in flight, 0 failed" in done.output
