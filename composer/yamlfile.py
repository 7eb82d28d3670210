"""Reading the YAML files users write (experiments, search spaces, pipeline configs), and writing YAML."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from composer.errors import ConfigError, InputError
from composer.files import open_regular
from composer.unicode import decode_utf8, invalid_text, printable


def read_yaml(path: str | Path, *, what: str = "file") -> Any:
    """The parsed document; a missing file, bad YAML or invalid text is a ConfigError naming the file (and
    the line and key where it can)."""
    p = Path(path)
    try:
        with open_regular(p) as f:  # a FIFO would block and /dev/zero never end
            data = f.read()
    except InputError as exc:
        why = f"{what} not found" if not os.path.lexists(p) else exc.raw_message
        raise ConfigError(why, path=p) from None
    try:
        text = decode_utf8(data, p)
    except InputError as exc:
        raise ConfigError(exc.raw_message, path=p, line=exc.line) from None
    try:
        return _load(text, p)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigError(f"invalid YAML: {getattr(exc, 'problem', exc)}", path=p,
                          line=None if mark is None else mark.line + 1) from None
    except RecursionError:
        raise ConfigError("invalid YAML: nested too deeply", path=p) from None


def dump_yaml(data: Any) -> str:
    """``data`` as block YAML, keys in their order, Arabic and Persian as they are: by libyaml's emitter
    where PyYAML has it (the same text, ~3x faster: a study writes a config per trial)."""
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(data, Dumper=dumper, allow_unicode=True, sort_keys=False)


def _load(text: str, path: Path) -> Any:
    """``yaml.safe_load``, with the node tree's text checked before it is constructed."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_text(node, path, "", set())
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_text(node: yaml.Node, path: Path, field: str, seen: set[int]) -> None:
    """Refuse a scalar holding a lone surrogate (a ``"\\ud800"`` escape), naming its line and key; ``seen``
    stops at nodes already walked (an alias may point back up)."""
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.ScalarNode):
        if (problem := invalid_text(node.value)) is not None:
            raise ConfigError(problem, path=path, line=node.start_mark.line + 1, field=field or None)
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            name = printable(str(key.value)) if isinstance(key, yaml.ScalarNode) else "?"
            _check_text(key, path, field, seen)
            _check_text(value, path, f"{field}.{name}" if field else name, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_text(item, path, f"{field}[{i}]", seen)
