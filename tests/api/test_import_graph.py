"""The import graph of ``composer/`` has no circles, and ``composer.tracking`` sits below ``composer.study``.

A circle hidden in a function-local import still ties two modules into one unit (neither can be
understood, tested or moved alone) and still fails with a half-initialised module when the call
order changes, so every ``import`` counts: module level, inside functions and classes, inside
``try``. Imports under ``if TYPE_CHECKING:`` do not count: they never run and only name types for
the checker. The graph is drawn between files: ``import composer.x`` and ``from composer import x``
reach ``composer/x/__init__.py`` (or ``composer/x.py``), ``from composer.x import y`` reaches
``composer/x/y.py`` when ``y`` is a submodule and ``composer/x/__init__.py`` otherwise. A
submodule's parent ``__init__`` running first is not an edge: a package re-exporting its own
submodules would otherwise always close a false circle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "composer"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node`` that can run, skipping ``if TYPE_CHECKING:`` bodies."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for orelse in child.orelse:
                yield from _runtime_imports(ast.Module(body=[orelse], type_ignores=[]))
        else:
            yield from _runtime_imports(child)


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def _targets(module: str, is_package: bool, source: str, modules: dict[str, Path]) -> set[str]:
    """The composer modules that ``module`` (whose code is ``source``) imports when that code runs."""
    found: set[str] = set()
    for node in _runtime_imports(ast.parse(source, module)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
            continue
        base = _absolute(module, is_package, node)
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            if submodule in modules:
                found.add(submodule)
            elif base in modules:
                found.add(base)
    found.discard(module)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {
        name: _targets(name, path.name == "__init__.py", path.read_text(encoding="utf-8"), modules)
        for name, path in modules.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One chain per strongly connected component with more than one module (Tarjan), closed on its start."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_chain(graph, component) for component in components]


def _chain(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest circle through the component's first module, found breadth first inside the component."""
    start = min(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for target in sorted(graph[node] & component):
                if target == start:
                    chain = [node]
                    while chain[-1] != start:
                        chain.append(parents[chain[-1]])
                    return [*reversed(chain), start]
                if target not in parents:
                    parents[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"no circle through {start} in {sorted(component)}")


def test_no_import_cycles() -> None:
    cycles = _cycles(_graph())
    assert not cycles, "import circles in composer/:\n" + "\n".join(" -> ".join(chain) for chain in cycles)


def test_tracking_does_not_import_study() -> None:
    offenders = {
        module: sorted(target for target in targets if target.startswith("composer.study"))
        for module, targets in _graph().items()
        if module.startswith("composer.tracking")
    }
    offenders = {module: targets for module, targets in offenders.items() if targets}
    assert not offenders, f"composer.tracking imports composer.study: {offenders}"


def test_graph_sees_hidden_and_relative_imports() -> None:
    """The checker itself: function-local and relative imports are edges, TYPE_CHECKING ones are not."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from composer.study import study\n"
        "def f():\n    from . import writer\n    import composer.errors\n"
        "    from composer.tracking.runs import log_run\n"
    )
    targets = _targets("composer.tracking.spool", False, source, _modules())
    assert targets == {"composer.tracking.writer", "composer.errors", "composer.tracking.runs"}
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
