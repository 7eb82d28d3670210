"""mkdocs hook: the reference pages' generated parts, made at build time from the code itself, so the CLI
and file references can never drift from the Typer app and the pydantic schemas.

A page asks for a part with a line ``<!-- generated: NAME -->``: ``cli`` (every command of the Typer app),
``experiment`` and ``pipeline`` (a table per section of the pydantic model's JSON schema) and
``space-keys`` (every dotted pipeline key a search-space dimension may name) and ``api-rest`` (the public
names the API page does not place in a section of its own).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

_MARKER = re.compile(r"^<!-- generated: ([\w-]+) -->$", re.MULTILINE)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace each ``<!-- generated: NAME -->`` line with its generated Markdown."""
    return _MARKER.sub(lambda m: _GENERATORS[m.group(1)](markdown), markdown)


def api_rest_markdown(markdown: str) -> str:
    """A ``::: composer.NAME`` section for each public name the page does not place itself: a name added
    to ``composer.__all__`` is in the reference from its first build."""
    import composer

    placed = set(re.findall(r"^::: composer\.(\w+)$", markdown, re.MULTILINE))
    rest = [name for name in composer.__all__ if name not in placed]
    if not rest:
        return "None: every public name has its section above."
    return "\n\n".join(f"::: composer.{name}" for name in rest)


# The command line -------------------------------------------------------------------------------------
def cli_markdown() -> str:
    """One section per command of ``composer`` (sub-commands included): usage, help, options."""
    import typer

    root = _root_command()
    parts = [_command_markdown(["composer"], root, typer.Context(root, info_name="composer"))]
    parts += [_command_markdown(path, command, ctx) for path, command, ctx in _commands(root)]
    return "\n\n".join(parts)


def command_paths() -> list[str]:
    """Every command line of the app (``composer eval``, ``composer judges check``...)."""
    return [" ".join(path) for path, _, _ in _commands(_root_command())]


def _root_command() -> Any:
    import typer.main

    from composer.cli.app import app

    return typer.main.get_command(app)


def _commands(root: Any) -> Iterator[tuple[list[str], Any, Any]]:
    """(command line, command, its context) for every command below ``root``, groups before theirs."""
    import typer

    def walk(path: list[str], group: Any, parent: Any) -> Iterator[tuple[list[str], Any, Any]]:
        for name in group.list_commands(parent):
            command = group.get_command(parent, name)
            ctx = typer.Context(command, info_name=name, parent=parent)
            yield [*path, name], command, ctx
            if hasattr(command, "list_commands"):
                yield from walk([*path, name], command, ctx)

    yield from walk(["composer"], root, typer.Context(root, info_name="composer"))


def _command_markdown(path: list[str], command: Any, ctx: Any) -> str:
    params = [p for p in command.params if not getattr(p, "hidden", False)]
    arguments = [_argument_name(p) for p in params if p.param_type_name == "argument"]
    tail = "COMMAND [ARGS]..." if hasattr(command, "list_commands") else ""
    usage = " ".join([*path, "[OPTIONS]", *arguments, tail]).strip()
    lines = [f"{'#' * min(len(path) + 1, 4)} `{' '.join(path)}`", "", "```text", usage, "```"]
    if command.help:
        lines += ["", _plain(command.help)]
    if params:
        lines += ["", "| argument or option | type | default | meaning |", "|---|---|---|---|"]
        lines += [_param_row(p, ctx) for p in params]
    return "\n".join(lines)


def _argument_name(param: Any) -> str:
    name = param.name.upper()
    return name if param.required else f"[{name}]"


def _param_row(param: Any, ctx: Any) -> str:
    if param.param_type_name == "argument":
        name = f"`{_argument_name(param)}`"
    else:
        name = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
    kind = "flag" if getattr(param, "is_flag", False) else param.display_type(ctx).strip("<>")
    if param.multiple:
        kind += ", repeatable"
    default = param.default
    shown = "" if default is None or default in ((), []) or callable(default) else f"`{default}`"
    return f"| {name} | {_cell(kind)} | {_cell(shown)} | {_cell(_plain(param.help or ''))} |"


def _plain(text: str) -> str:
    """Help text as Typer shows it (Rich markup applied, then dropped), one paragraph per line."""
    from rich.errors import MarkupError
    from rich.text import Text

    with contextlib.suppress(MarkupError):  # not markup after all: show it as written
        text = Text.from_markup(text).plain
    return "\n\n".join(" ".join(p.split()) for p in text.split("\n\n") if p.strip()).replace("<", "&lt;")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


# The configuration files -------------------------------------------------------------------------------
def schema_markdown(model: Any, title: str) -> str:
    """A table per object of ``model``'s JSON schema: the top level, then each nested section."""
    schema = model.model_json_schema()
    defs: dict[str, Any] = schema.get("$defs", {})
    classes = _models(model)
    out = [_object_table(title, schema, model)]
    for name in _reachable(schema, defs):
        out.append(_object_table(f"`{name}`", defs[name], classes.get(name)))
    return "\n\n".join(out)


def _models(model: Any) -> dict[str, Any]:
    """The pydantic models ``model``'s fields hold, by class name (the schema's ``$defs`` names): their
    defaults, default factories included, come from the classes, which the JSON schema leaves out."""
    import typing

    from pydantic import BaseModel

    found: dict[str, Any] = {}

    def visit(annotation: Any) -> None:
        model = isinstance(annotation, type) and issubclass(annotation, BaseModel)
        if model and annotation.__name__ not in found:
            found[annotation.__name__] = annotation
            for field in annotation.model_fields.values():
                visit(field.annotation)
        for arg in typing.get_args(annotation):
            visit(arg)

    visit(model)
    return found


def _reachable(schema: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    """The nested models ``schema`` refers to, in the order its fields name them."""
    seen: list[str] = []

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/") and (name := ref.removeprefix("#/$defs/")) not in seen:
                seen.append(name)
                visit(defs[name])
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(schema.get("properties", {}))
    return seen


def _object_table(title: str, schema: dict[str, Any], model: Any) -> str:
    lines = [f"### {title}", ""]
    if schema.get("description"):
        lines += [" ".join(schema["description"].split()), ""]
    required = set(schema.get("required", []))
    lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, field in schema.get("properties", {}).items():
        default = "required" if key in required else _default(model, key, field)
        lines.append(f"| `{key}` | {_cell(_type(field))} | {_cell(default)} | "
                     f"{_cell(field.get('description', ''))} |")
    return "\n".join(lines)


def _default(model: Any, key: str, field: dict[str, Any]) -> str:
    value = field.get("default")
    info = model.model_fields.get(key) if model is not None else None
    if info is None:  # an alias: the schema names the field by it
        info = next((f for f in getattr(model, "model_fields", {}).values() if f.alias == key), None)
    if info is not None:
        value = info.get_default(call_default_factory=True)
        value = value.model_dump(mode="json") if hasattr(value, "model_dump") else value
    if isinstance(value, dict | list) and len(str(value)) > 60:
        return "see its section" if "$ref" in field or "anyOf" in field else f"`{value}`"
    return f"`{'null' if value is None else value}`"


def _type(field: dict[str, Any]) -> str:
    """A field's type in words: ``int``, ``bm25 | dense``, ``list of str``, a section's name."""
    if "$ref" in field:
        return f"`{field['$ref'].removeprefix('#/$defs/')}`"
    if "enum" in field:
        return " | ".join(f"`{v}`" for v in field["enum"])
    if "const" in field:
        return f"`{field['const']}`"
    for union in ("anyOf", "oneOf"):
        if union in field:
            return " or ".join(_type(option) for option in field[union])
    kind = field.get("type", "any")
    if kind == "array":
        return f"list of {_type(field.get('items', {}))}"
    if kind == "object" and isinstance(field.get("additionalProperties"), dict):
        return f"mapping to {_type(field['additionalProperties'])}"
    return {"string": "text", "integer": "int", "number": "float", "boolean": "bool"}.get(kind, kind)


def pipeline_keys() -> list[tuple[str, str]]:
    """Every dotted key of a pipeline config with its type: what a search-space dimension may name."""
    from composer.pipeline.config import PipelineConfig

    schema = PipelineConfig.model_json_schema()
    defs: dict[str, Any] = schema.get("$defs", {})
    keys = []
    for section, field in schema["properties"].items():
        sub = defs[field["$ref"].removeprefix("#/$defs/")]
        keys += [(f"{section}.{key}", _type(value)) for key, value in sub.get("properties", {}).items()]
    return keys


def space_keys_markdown() -> str:
    rows = [f"| `{key}` | {_cell(kind)} |" for key, kind in pipeline_keys()]
    return "\n".join(["| dimension key | values |", "|---|---|", *rows])


def _experiment() -> str:
    from composer.study.experiment import ExperimentConfig

    return schema_markdown(ExperimentConfig, "The top level")


def _pipeline() -> str:
    from composer.pipeline.config import PipelineConfig

    return schema_markdown(PipelineConfig, "The top level")


# Each takes the page's Markdown (only the API reference reads it).
_GENERATORS: dict[str, Callable[[str], str]] = {
    "cli": lambda _: cli_markdown(),
    "experiment": lambda _: _experiment(),
    "pipeline": lambda _: _pipeline(),
    "space-keys": lambda _: space_keys_markdown(),
    "api-rest": api_rest_markdown,
}
