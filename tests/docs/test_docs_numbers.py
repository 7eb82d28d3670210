"""The figures the docs quote from the demo study (issue 42) are what the tool prints: `make demo`'s
study is run as a user runs it, and every line of the quoted output (getting-started.md) and the held-out
line (concepts/statistics.md) must be among the lines it printed, with only the timings masked (and the
folder it ran in, which the docs cannot know, and the spacing of the columns). And no other page's
blocks overwrite the `best.yaml` that Get started exports."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from doc_blocks import REPO_ROOT, blocks_of, doc_pages, offline_env, prepare_folder

_SECONDS = re.compile(r"^(#\d+ [A-Z]+ \S+) \d+\.\ds")
"""A trial's line: its duration."""
_MS_PER_Q = re.compile(r"^(#\d+ done(?: \S+){5}) \d+\.\d")
"""A leaderboard row: its ms/question."""
_WRITES_BEST = re.compile(r"""--out\s+best\.yaml|open\(\s*["']best\.yaml["']\s*,\s*["']w""")


def _normal(line: str, folder: str = "") -> str:
    """The line's words, one space apart (a table's column widths follow its timings), timings masked."""
    line = " ".join((line.replace(folder, "") if folder else line).split())
    return _MS_PER_Q.sub(r"\1 <ms>", _SECONDS.sub(r"\1 <s>", line))


def _quoted(page: str, marker: str) -> list[str]:
    """The lines of the page's first ``text`` block holding ``marker``, less the "…" of an abridged one."""
    block = next(b for b in blocks_of(REPO_ROOT / page) if b.language == "text" and marker in b.code)
    return [_normal(line) for line in block.code.splitlines() if line.strip() not in ("", "…")]


@pytest.mark.slow
def test_the_demo_figures_in_the_docs_are_the_demo_study_s(tmp_path: Path) -> None:
    prepare_folder(tmp_path)
    env = {**offline_env(tmp_path), "COLUMNS": "400"}  # as the docs quote them: no line wrapped
    done = subprocess.run(["composer", "optimize", "experiments/arabic-demo.yaml"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    printed = {_normal(line, f"{tmp_path}/") for line in (done.stdout + done.stderr).splitlines()}
    quoted = _quoted("docs/getting-started.md", "best: trial")
    held_out = _quoted("docs/concepts/statistics.md", "held-out (")
    assert any(line.startswith("held-out (") for line in quoted) and held_out
    missing = [line for line in quoted + held_out if line not in printed]
    assert not missing, "quoted in the docs but not printed:\n" + "\n".join(missing) + "\n\nprinted:\n" + (
        "\n".join(sorted(printed)))


def test_only_the_pages_that_export_the_demo_winner_write_best_yaml() -> None:
    """A reader who follows Get started and then another page keeps the winner exported: a page writing
    a config of its own names it otherwise."""
    writers = {b.page for path in doc_pages() for b in blocks_of(path)
               if b.runs and _WRITES_BEST.search(b.code)}
    assert writers == {"README.md", "docs/getting-started.md"}
