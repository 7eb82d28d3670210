"""Reading the YAML files users write (experiments, search spaces, pipeline configs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from composer.errors import ConfigError


def read_yaml(path: str | Path, *, what: str = "file") -> Any:
    """The parsed document; a missing file or bad YAML is a ConfigError naming the file (and the line)."""
    p = Path(path)
    try:
        return yaml.safe_load(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{what} not found", path=p) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigError(f"invalid YAML: {getattr(exc, 'problem', exc)}", path=p,
                          line=None if mark is None else mark.line + 1) from None
