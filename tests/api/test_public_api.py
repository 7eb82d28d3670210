"""The front door's promises: the package is typed (``py.typed`` shipped), every public name is documented
in Google style with an example, and every public annotation names a type a tool can resolve."""

from __future__ import annotations

import importlib.resources
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomllib

import composer
import composer.protocols

ROOT = Path(__file__).resolve().parents[2]
METHODS = {
    "Pipeline": ("index", "search", "asearch", "ask", "aask"),
    "EvaluationReport": ("means", "stats", "save"),
}
"""The public classes' methods a user calls first: documented like the functions."""


def _public(name: str) -> Any:
    return getattr(composer, name)


def _namespace() -> dict[str, Any]:
    """What annotations of the public API may name: the public names and the protocols' aliases (the
    modules import the heavy ones only for a type checker, so ``import composer`` stays light)."""
    return {**vars(composer.protocols), **{name: _public(name) for name in composer.__all__}}


def _takes_arguments(fn: Callable[..., Any]) -> bool:
    params = list(inspect.signature(fn).parameters.values())
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    return any(p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)


def _check_function(fn: Callable[..., Any], label: str) -> None:
    doc = inspect.getdoc(fn) or ""
    assert "Example:" in doc, f"{label}: no Example section"
    if _takes_arguments(fn):
        assert "Args:" in doc, f"{label}: no Args section"
    if typing.get_type_hints(fn, localns=_namespace()).get("return", type(None)) is not type(None):
        assert "Returns:" in doc, f"{label}: no Returns section"


def test_py_typed_ships_with_the_package() -> None:
    assert importlib.resources.files("composer").joinpath("py.typed").is_file()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["composer"]


@pytest.mark.parametrize("name", composer.__all__)
def test_every_public_name_is_documented_with_an_example(name: str) -> None:
    obj = _public(name)
    if inspect.isclass(obj):
        doc = inspect.getdoc(obj) or ""
        assert "Example:" in doc, f"{name}: no Example section"
        try:
            takes = _takes_arguments(obj)
        except ValueError:  # a builtin's signature (an exception class): *args
            takes = False
        if takes:
            assert "Args:" in doc or "Attributes:" in doc, f"{name}: no Args (or Attributes) section"
        for attr, value in vars(obj).items():
            member = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
            if not attr.startswith("_") and inspect.isfunction(member):
                assert inspect.getdoc(member), f"{name}.{attr}: no docstring"
    else:
        _check_function(obj, name)
        assert "Raises:" in (inspect.getdoc(obj) or ""), f"{name}: no Raises section"


@pytest.mark.parametrize(("cls", "method"), [(c, m) for c, ms in METHODS.items() for m in ms])
def test_front_door_methods_are_documented_with_an_example(cls: str, method: str) -> None:
    _check_function(getattr(_public(cls), method), f"{cls}.{method}")


@pytest.mark.parametrize("name", [n for n in composer.__all__ if inspect.isfunction(_public(n))])
def test_public_annotations_resolve(name: str) -> None:
    hints = typing.get_type_hints(_public(name), localns=_namespace())
    assert "return" in hints
    # the user's side is typed by the protocols, not Any
    assert all(hint is not Any for key, hint in hints.items() if key in ("system", "target", "questions"))
