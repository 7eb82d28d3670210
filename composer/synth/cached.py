"""A generated set kept under the workdir, so an experiment that names only a corpus generates it once."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from composer.data.questions import load_questions
from composer.data.types import Corpus, QuestionSet
from composer.llm.client import LLMClient
from composer.llm.spend import purpose
from composer.synth.config import SynthConfig
from composer.synth.engine import require_questions, synthesize
from composer.synth.output import write_questions, write_report


def cache_path(corpus: Corpus, config: SynthConfig, workdir: Path) -> Path:
    """``<workdir>/cache/synth/<hash of corpus fingerprint + settings>.jsonl``; its report sits beside it."""
    digest = hashlib.sha256(json.dumps([corpus.fingerprint(), config.fingerprint()]).encode()).hexdigest()
    return workdir / "cache" / "synth" / f"{digest[:16]}.jsonl"


def synthesize_cached(
    corpus: Corpus, config: SynthConfig, workdir: Path, *, client: LLMClient | None = None
) -> QuestionSet:
    """The set for this corpus and these settings: read from the cache, else generated and cached.

    LLM replies are cached under ``<workdir>/cache/llm`` as for every other call, so even a lost set file
    is regenerated without a request. An empty set (every call failed) is not cached.
    """
    path = cache_path(corpus, config, workdir)
    if not path.exists():
        client = client or LLMClient(config.llm, cache_dir=workdir / "cache" / "llm")
        with purpose("synth"):
            outcome = synthesize(corpus, config, client)
        require_questions(outcome)
        write_report(outcome.report, path.with_suffix(".report.json"))
        write_questions(outcome.rows, path)
    return load_questions(path, corpus=corpus, strict=True)
