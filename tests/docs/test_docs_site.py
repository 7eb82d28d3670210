"""The documentation site builds with ``mkdocs build --strict`` (no broken link, anchor or page left out of
the navigation), and its reference covers every command of the CLI and every public name of the library,
including those added after the docs were written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import REPO_ROOT
from docs_hooks import command_paths

import composer


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    mkdocs = Path(sys.executable).parent / "mkdocs"
    done = subprocess.run([str(mkdocs), "build", "--strict", "--site-dir", str(out)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-6000:]
    return out


def _ids(html: Path) -> set[str]:
    return set(re.findall(r'id="([^"]+)"', html.read_text(encoding="utf-8")))


def test_every_public_name_is_in_the_api_reference(site: Path) -> None:
    ids = _ids(site / "reference" / "api" / "index.html")
    missing = [name for name in composer.__all__ if f"composer.{name}" not in ids]
    assert not missing, f"composer.__all__ names missing from docs/reference/api.md: {missing}"


def test_every_command_is_in_the_cli_reference(site: Path) -> None:
    ids = _ids(site / "reference" / "cli" / "index.html")
    paths = command_paths()
    assert {"composer eval", "composer optimize", "composer judges check"} <= set(paths)
    missing = [p for p in paths if p.replace(" ", "-") not in ids]
    assert not missing, f"commands missing from the CLI reference: {missing}"


def test_file_references_are_generated_from_the_schemas(site: Path) -> None:
    """Every top-level key of the experiment and pipeline schemas has its row in the built pages."""
    from composer.pipeline.config import PipelineConfig
    from composer.study.experiment import ExperimentConfig

    for page, model in (("experiment", ExperimentConfig), ("pipeline", PipelineConfig)):
        html = (site / "reference" / page / "index.html").read_text(encoding="utf-8")
        missing = [key for key in model.model_fields if f"<code>{key}</code>" not in html]
        assert not missing, f"{page} keys missing from the reference: {missing}"
    space = (site / "reference" / "space" / "index.html").read_text(encoding="utf-8")
    assert "<code>retrieval.k1</code>" in space and "<code>chunking.window</code>" in space


def test_every_page_is_built(site: Path) -> None:
    pages = sorted(p.relative_to(REPO_ROOT / "docs") for p in (REPO_ROOT / "docs").rglob("*.md"))
    for page in pages:
        built = site / ("index.html" if page.name == "index.md" else page.with_suffix("") / "index.html")
        assert built.exists(), f"docs/{page} was not built"
