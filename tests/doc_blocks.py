"""The code blocks of the documentation (README.md and docs/**/*.md) and how they are run.

A ```bash (or sh, shell) and a ```python block runs unless the line right before its fence is
``<!-- not run: <reason> -->``. A page's blocks run in order in one temporary folder holding a copy of the
bundled data, Python blocks in one namespace (like a notebook), so a later block reads what an earlier one
made. A block that is only a snippet include of ``examples/*.py`` (``--8<-- "examples/x.py"``) is run by
tests/docs/test_examples_scripts.py instead.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SHELL = {"bash", "sh", "shell"}
PYTHON = {"python", "py"}
_FENCE = re.compile(r"^(\s*)```\s*([\w+-]*)")
_NOT_RUN = re.compile(r"^\s*<!-- not run: (\S.*?) -->\s*$")
_SNIPPET = re.compile(r'^--8<-- "(examples/[\w-]+\.py)"$')


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    skip_reason: str | None

    @property
    def runs(self) -> bool:
        return self.skip_reason is None and self.language in SHELL | PYTHON

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def doc_pages() -> list[Path]:
    """README.md and every Markdown page of the site."""
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]


def blocks_of(path: Path, root: Path = REPO_ROOT) -> list[Block]:
    """Every fenced block of a page, in order, with why it is not run (if it is not)."""
    page = path.relative_to(root).as_posix()
    lines = path.read_text(encoding="utf-8").split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, language = match.group(1), match.group(2).lower()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise ValueError(f"{page}:{i + 1}: code block never closed")
        code = "\n".join(line.removeprefix(indent) for line in lines[i + 1:end])
        marker = _NOT_RUN.match(lines[i - 1]) if i > 0 else None
        skip = marker.group(1) if marker else None
        if skip is None and _SNIPPET.match(code.strip()):
            skip = "an example script, run by tests/docs/test_examples_scripts.py"
        blocks.append(Block(page, i + 1, language, code, skip))
        i = end + 1
    return blocks


def prepare_folder(folder: Path) -> None:
    """What the blocks read, as a user's checkout has it: the bundled data, experiments and spaces."""
    (folder / "examples").mkdir(parents=True)
    for name in ("arcd-sample", "arcd-conversations", "ci"):
        shutil.copytree(REPO_ROOT / "examples" / name, folder / "examples" / name)
    (folder / "examples" / "arcd").symlink_to(REPO_ROOT / "examples" / "arcd")
    for script in (REPO_ROOT / "examples").glob("*.py"):
        shutil.copy(script, folder / "examples" / script.name)
    for name in ("experiments", "search_spaces"):
        shutil.copytree(REPO_ROOT / name, folder / name)


def offline_env(folder: Path) -> dict[str, str]:
    """The environment of a user of the installed package, offline, its caches inside ``folder``."""
    venv_bin = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "COMPOSER_CACHE_DIR": str(folder / ".cache" / "composer"),
        "XDG_CACHE_HOME": str(folder / ".cache"),
        "MPLBACKEND": "Agg",
        "COLUMNS": "160",
    }


def run_page(path: Path, folder: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a page's blocks in ``folder`` (prepared beforehand), in one Python process."""
    blocks = [asdict(b) for b in blocks_of(path) if b.runs]
    script = folder / ".doc-blocks.json"
    script.write_text(json.dumps(blocks), encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-c", _RUNNER, str(script)], cwd=folder, env=offline_env(folder),
        capture_output=True, text=True, timeout=timeout, check=False,
    )


# Runs in the child: Python blocks share one namespace; a shell block is bash with -e and pipefail.
_RUNNER = """
import json, subprocess, sys, traceback
namespace = {"__name__": "__main__"}
for block in json.load(open(sys.argv[1], encoding="utf-8")):
    where = f"{block['page']}:{block['line']}"
    print(f"=== {where} ({block['language']})", flush=True)
    if block["language"] in ("python", "py"):
        try:
            exec(compile(block["code"], where, "exec"), namespace)
        except BaseException:
            traceback.print_exc()
            sys.exit(f"FAILED: the python block at {where}")
    else:
        sys.stdout.flush()
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block["code"]], check=False)
        if done.returncode:
            sys.exit(f"FAILED: the shell block at {where} exited {done.returncode}")
    sys.stdout.flush()
"""
