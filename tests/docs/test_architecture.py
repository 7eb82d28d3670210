"""docs/architecture.md's code map matches the package: one line per package and top-level module of
composer/, no line for one that is gone, and every composer/ path the page names exists."""

from __future__ import annotations

import re

from doc_blocks import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "architecture.md"
_ENTRY = re.compile(r"^- `(composer/[\w./]+)`: ", re.MULTILINE)


def _on_disk() -> set[str]:
    package = REPO_ROOT / "composer"
    folders = {f"composer/{p.name}/" for p in package.iterdir() if (p / "__init__.py").exists()}
    modules = {f"composer/{p.name}" for p in package.glob("*.py")}
    return folders | modules


def test_code_map_lists_every_package_and_module_once() -> None:
    entries = _ENTRY.findall(PAGE.read_text(encoding="utf-8"))
    assert len(entries) == len(set(entries)), "a line of the code map is repeated"
    on_disk = _on_disk()
    assert not on_disk - set(entries), f"missing from the code map: {sorted(on_disk - set(entries))}"
    gone = set(entries) - on_disk
    assert not gone, f"in the code map but not in composer/: {sorted(gone)}"


def test_every_composer_path_named_exists() -> None:
    """Paths in the prose too (`composer/record.py`, `study/fate.py`), so a renamed file is noticed."""
    text = PAGE.read_text(encoding="utf-8")
    named = set(re.findall(r"`(?:composer/)?((?:[a-z_]+/)+[a-z_]+\.py)", text))
    missing = [p for p in named if not (REPO_ROOT / "composer" / p).exists()
               and not (REPO_ROOT / p).exists()]
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"
