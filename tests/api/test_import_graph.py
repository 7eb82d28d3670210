"""The import graph of ``composer/`` has no circles, between modules or between packages, and
``composer.tracking`` sits below ``composer.study``.

A circle hidden in a function-local import still ties two modules into one unit (neither can be
understood, tested or moved alone) and still fails with a half-initialised module when the call
order changes, so every ``import`` counts: module level, inside functions and classes, inside
``try``, and under ``if TYPE_CHECKING:``: such an import never runs, but a reader still has to know the
module it names to read this one. The graph is drawn between files: ``import composer.x`` and
``from composer import x`` reach ``composer/x/__init__.py`` (or ``composer/x.py``), ``from composer.x
import y`` reaches ``composer/x/y.py`` when ``y`` is a submodule and ``composer/x/__init__.py`` otherwise.
A submodule's parent ``__init__`` running first is not an edge: a package re-exporting its own
submodules would otherwise always close a false circle.

Between packages, each first-level package and each top-level module is one unit (``composer.study``,
``composer.api``...): a circle there means no package can be read without the others, even when its
modules form no circle.
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


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node``, wherever it is (``TYPE_CHECKING`` blocks included)."""
    for child in ast.walk(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def _targets(module: str, is_package: bool, source: str, modules: dict[str, Path]) -> set[str]:
    """The composer modules that ``module`` (whose code is ``source``) imports."""
    found: set[str] = set()
    for node in _imports(ast.parse(source, module)):
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


def _unit(module: str) -> str:
    """The package-level unit of a module: ``composer.study.runner`` -> ``composer.study``."""
    return ".".join(module.split(".")[:2])


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    units: dict[str, set[str]] = {_unit(module): set() for module in graph}
    for module, targets in graph.items():
        units[_unit(module)].update(_unit(t) for t in targets if _unit(t) != _unit(module))
    units.pop("composer", None)  # the root package names the public API: it sits above every unit
    for targets in units.values():
        targets.discard("composer")
    return units


def test_no_package_cycles() -> None:
    cycles = _cycles(_package_graph(_graph()))
    assert not cycles, "package circles in composer/:\n" + "\n".join(" -> ".join(chain) for chain in cycles)


def test_tracking_does_not_import_study() -> None:
    offenders = {
        module: sorted(target for target in targets if target.startswith("composer.study"))
        for module, targets in _graph().items()
        if module.startswith("composer.tracking")
    }
    offenders = {module: targets for module, targets in offenders.items() if targets}
    assert not offenders, f"composer.tracking imports composer.study: {offenders}"


def test_graph_sees_hidden_and_relative_imports() -> None:
    """The checker itself: function-local, relative and TYPE_CHECKING imports are edges; a package circle is
    found where the modules form none."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from composer.study import study\n"
        "def f():\n    from . import writer\n    import composer.errors\n"
        "    from composer.metrics.names import mlflow_metric_name\n"
    )
    targets = _targets("composer.tracking.spool", False, source, _modules())
    assert targets == {"composer.study.study", "composer.tracking.writer", "composer.errors",
                       "composer.metrics.names"}
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    modules = {"composer.a.x": {"composer.b.y"}, "composer.b.y": {"composer.a.z"}, "composer.a.z": set()}
    assert _cycles(_package_graph(modules)) == [["composer.a", "composer.b", "composer.a"]]
