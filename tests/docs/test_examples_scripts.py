"""Each runnable script of examples/ runs from a user's checkout, offline, and prints what it promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import REPO_ROOT, offline_env, prepare_folder

# What each script prints on the bundled sample (a new script needs its line here, or this test fails).
_EXPECTED = {
    "own_retriever.py": "nDCG@10 0.764",
    "tune_factory.py": "not significantly",
}
_SLOW = {"tune_factory.py"}  # a whole study: ~30 s on 2 cores


def _scripts() -> list[object]:
    return [pytest.param(path, id=path.name, marks=[pytest.mark.slow] if path.name in _SLOW else [])
            for path in sorted((REPO_ROOT / "examples").glob("*.py"))]


def test_every_script_has_its_expectation() -> None:
    assert {p.name for p in (REPO_ROOT / "examples").glob("*.py")} == set(_EXPECTED)


@pytest.mark.parametrize("script", _scripts())
def test_example_script_runs(script: Path, tmp_path: Path) -> None:
    prepare_folder(tmp_path)
    done = subprocess.run([sys.executable, f"examples/{script.name}"], cwd=tmp_path,
                          env=offline_env(tmp_path), capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-6000:]
    assert _EXPECTED[script.name] in done.stdout, done.stdout[-3000:]
