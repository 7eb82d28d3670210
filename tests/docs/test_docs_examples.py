"""Every shell and Python block of README.md and docs/**/*.md runs on the bundled data, offline, as a user
would type it (unless marked ``<!-- not run: <reason> -->``): the documentation cannot rot silently."""

from __future__ import annotations

from pathlib import Path

import pytest
from doc_blocks import REPO_ROOT, blocks_of, doc_pages, prepare_folder, run_page

# Pages whose blocks run a whole study (20-40 s each on 2 cores), or several composer processes and
# index builds (4-8 s): the slow tier.
_SLOW = {"README.md", "docs/getting-started.md", "docs/how-to/llm-cost.md", "docs/how-to/pipelines.md",
         "docs/how-to/analyzers.md", "docs/concepts/index-keys-and-caches.md",
         "docs/how-to/your-own-system.md"}


def _params() -> list[object]:
    params: list[object] = []
    for path in doc_pages():
        page = path.relative_to(REPO_ROOT).as_posix()
        if any(b.runs for b in blocks_of(path)):
            marks = [pytest.mark.slow] if page in _SLOW else []
            params.append(pytest.param(path, id=page, marks=marks))
    return params


@pytest.mark.parametrize("path", _params())
def test_page_blocks_run(path: Path, tmp_path: Path) -> None:
    prepare_folder(tmp_path)
    done = run_page(path, tmp_path, timeout=300)
    assert done.returncode == 0, f"{done.stdout[-6000:]}\n{done.stderr[-6000:]}"


def test_every_block_is_run_or_says_why() -> None:
    """A shell or Python block either runs, or its not-run marker gives a reason; the pages have some of
    both, and the guides that run on bundled data are among the pages run."""
    blocks = [b for path in doc_pages() for b in blocks_of(path)]
    code = [b for b in blocks if b.language in {"bash", "sh", "shell", "python", "py"}]
    assert all(b.runs or b.skip_reason for b in code)
    run_pages = {b.page for b in code if b.runs}
    for page in ("README.md", "docs/getting-started.md", "docs/how-to/your-own-system.md",
                 "docs/how-to/pipelines.md", "docs/how-to/analyzers.md", "docs/how-to/document-folders.md",
                 "docs/how-to/production.md", "docs/concepts/k-trap.md"):
        assert page in run_pages, f"{page} has no block that runs"


def test_not_run_marker_needs_the_line_right_before(tmp_path: Path) -> None:
    """The marker skips only the block right after it, and a block with no marker runs."""
    page = tmp_path / "page.md"
    page.write_text("<!-- not run: needs a server -->\n```bash\nexit 1\n```\n\n<!-- not run: x -->\n\n"
                    "```python\nprint(1)\n```\n", encoding="utf-8")
    first, second = blocks_of(page, root=tmp_path)
    assert (first.runs, first.skip_reason) == (False, "needs a server")
    assert second.runs and second.line == 8
