"""Shared test set-up: offline by construction, and the datasets: ARCD ships in examples/arcd; PersianQA
(GPL-3.0, so not in the repository) is read from $COMPOSER_PERSIANQA, and its tests skip without it."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from fake_llm_server import FakeLLMServer

# Set before any test module imports huggingface_hub, transformers or litellm: they read these at import.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
# pytest-xdist's workers inherit COLUMNS=80 and LINES=24: the CLI would then wrap what tests read as lines.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)
# A suite started in the background by a non-interactive shell (`make test &`, nohup) inherits SIGINT
# ignored, and so would every study it starts: the Ctrl-C tests need Python's own handler, here and in them.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


PERSIANQA_ENV = "COMPOSER_PERSIANQA"


@pytest.fixture(scope="session")
def arcd_dir() -> Path:
    return REPO_ROOT / "examples" / "arcd"


def persianqa_path() -> Path | None:
    """PersianQA's folder (corpus.jsonl, questions.jsonl, questions_unanswerable.jsonl), if given."""
    value = os.environ.get(PERSIANQA_ENV)
    return Path(value) if value and Path(value).is_dir() else None


@pytest.fixture(scope="session")
def persianqa_dir() -> Path:
    path = persianqa_path()
    if path is None:
        pytest.skip(f"PersianQA not given: set {PERSIANQA_ENV} to its folder (GPL-3.0: not in this repo)")
    return path


@pytest.fixture
def fake_llm_golds() -> dict[str, str]:
    """What ``fake_llm`` answers, by question: the sample study's questions and first gold answers. A
    module whose questions differ overrides this fixture."""
    from scripted_llm import golds_of

    return golds_of(REPO_ROOT / "examples" / "arcd-sample" / "questions.jsonl")


@pytest.fixture
def fake_llm_latency() -> float:
    """Seconds ``fake_llm`` waits before each reply; a module that needs requests in flight (a study
    to interrupt, a server's concurrency) overrides this fixture."""
    return 0.0


@pytest.fixture
def fake_llm(fake_llm_golds: dict[str, str], fake_llm_latency: float) -> Iterator[FakeLLMServer]:
    """A local OpenAI-compatible server replying as a RAG model would (``scripted_llm.ScriptedRAG`` over
    ``fake_llm_golds``), fresh for each test: its counts, queued faults and route are the test's own."""
    from fake_llm_server import FakeLLMServer
    from scripted_llm import ScriptedRAG

    with FakeLLMServer(ScriptedRAG(fake_llm_golds), latency=fake_llm_latency) as server:
        yield server
