"""docs/concepts/glossary.md cannot rot: every code name it gives a word (`composer.…`) still names a
module, or something a module defines."""

from __future__ import annotations

import importlib
import re

from doc_blocks import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "concepts" / "glossary.md"


def _resolves(dotted: str) -> bool:
    """The longest importable module prefix of ``dotted``, then each remaining part as an attribute."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


def test_every_code_name_of_the_glossary_exists() -> None:
    names = set(re.findall(r"`(composer(?:\.\w+)+)`", PAGE.read_text(encoding="utf-8")))
    assert len(names) > 20, "the glossary names the code it speaks of"
    missing = sorted(n for n in names if not _resolves(n))
    assert not missing, f"docs/concepts/glossary.md names code that does not exist: {missing}"
