"""Checking a team's template for its use, and turning it into the ``PromptTemplate`` that is sent.

A template is written with ``{placeholder}`` fields (``{{``/``}}`` are literal braces): the form people
and MLflow's registry know. It is checked against the fields its use fills (``allowed``) and must show
(``required``), so a typo fails when the prompt is loaded, not as a silently empty prompt at trial 40.
The ``PromptTemplate`` it becomes fences its data fields exactly as the built-in templates do: passages
stay fenced as untrusted data whatever the team's text says about them.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import replace
from pathlib import Path
from string import Template

from composer.errors import ConfigError
from composer.llm.prompt import UNTRUSTED, PromptLanguage, PromptTemplate, fenced
from composer.prompts.spec import PromptMessages, UserPrompt, is_registry_uri

ANSWER_FIELDS = frozenset({"question", "contexts", "history"})
"""The placeholders an answer template may use: the question, its numbered passages, the conversation so
far (``history``, a follow-up's turns; empty on a first turn)."""
ANSWER_REQUIRED = frozenset({"question", "contexts"})
"""The placeholders an answer template must show, in its system or user message."""

_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def placeholders(text: str, *, field: str, path: str | Path | None = None, line: int | None = None
                 ) -> list[str]:
    """The ``{name}`` fields of ``text`` in order; a lone brace or a field that is no name (``{0}``,
    ``{a.b}``) is a ConfigError naming ``field`` (and ``path``/``line`` where the text came from a
    file)."""
    names: list[str] = []
    for match in _TOKEN.finditer(text):
        token, name = match.group(0), match.group(1)
        if token in ("{{", "}}"):
            continue
        if name is None:
            raise ConfigError(
                f"unbalanced brace {token!r} at character {match.start() + 1}: write {token * 2} for a "
                "literal brace", path=path, line=line, field=field)
        if not _NAME.fullmatch(name):
            raise ConfigError(f"{token!r} is not a placeholder: write {{name}} (or {{{{ }}}} for literal "
                              "braces)", path=path, line=line, field=field)
        names.append(name)
    return names


def check_messages(
    messages: PromptMessages, *, allowed: Collection[str], required: Collection[str], field: str,
    path: str | Path | None = None, lines: dict[str, int] | None = None,
) -> None:
    """Refuse a variant whose placeholders its use cannot fill, or that leaves out one it must show.

    ``field`` is the variant's dotted key (``generation.prompt.ar``); ``lines`` the file line of its
    ``system`` and ``user`` keys, where known. Each failure is one ConfigError naming the message.
    """
    found: set[str] = set()
    for part in ("system", "user"):
        where = f"{field}.{part}"
        line = (lines or {}).get(part)
        for name in placeholders(getattr(messages, part), field=where, path=path, line=line):
            if name not in allowed:
                shown = ", ".join(f"{{{a}}}" for a in sorted(allowed))
                raise ConfigError(f"unknown placeholder {{{name}}}; allowed: {shown}", path=path, line=line,
                                  field=where)
            found.add(name)
    missing = sorted(set(required) - found)
    if missing:
        raise ConfigError(f"missing placeholder {{{missing[0]}}}: the system or user message must show it",
                          path=path, line=(lines or {}).get("user"), field=field)


def check_prompt(prompt: UserPrompt, *, allowed: Collection[str] = ANSWER_FIELDS,
                 required: Collection[str] = ANSWER_REQUIRED, field: str) -> UserPrompt:
    """``prompt`` with each variant checked (``check_messages``), errors naming ``field.<variant>`` and,
    for a prompt read from a file, the file."""
    path = prompt.source if prompt.source and not is_registry_uri(prompt.source) else None
    for key, messages in prompt.variants().items():
        check_messages(messages, allowed=allowed, required=required, field=f"{field}.{key}", path=path)
    return prompt


def dollar_form(text: str) -> str:
    """``{name}`` text as ``string.Template`` text: ``$`` escaped, ``{x}`` as ``${x}``, ``{{``/``}}`` as
    single braces (the text is checked first: ``placeholders``)."""
    def one(match: re.Match[str]) -> str:
        token = match.group(0)
        if token in ("{{", "}}"):
            return token[0]
        return f"${{{match.group(1)}}}"

    out: list[str] = []
    end = 0
    for match in _TOKEN.finditer(text):
        out.append(text[end:match.start()].replace("$", "$$"))
        out.append(one(match))
        end = match.end()
    out.append(text[end:].replace("$", "$$"))
    return "".join(out)


def literal_braces(text: str) -> str:
    """``text`` with its braces doubled: literal in the ``{placeholder}`` form."""
    return text.replace("{", "{{").replace("}", "}}")


def brace_form(text: str) -> str:
    """``string.Template`` text (a built-in template's) in the ``{name}`` form, the inverse of
    ``dollar_form``: literal braces doubled, ``$name`` as ``{name}``, ``$$`` as ``$``."""
    out: list[str] = []
    end = 0
    for match in Template.pattern.finditer(text):
        name = match.group("named") or match.group("braced")
        out.append(literal_braces(text[end:match.start()]))
        out.append("$" if name is None else f"{{{name}}}")  # $$, or a lone $ Template leaves as it is
        end = match.end()
    out.append(literal_braces(text[end:]))
    return "".join(out)


def prompt_template(messages: PromptMessages, lang: PromptLanguage, data: Sequence[str]) -> PromptTemplate:
    """A checked variant as the ``PromptTemplate`` sent in ``lang``: the fields ``data`` fenced, the system
    message saying fenced text is untrusted data (``composer.llm.prompt.fenced``), as the built-in
    templates are. A system message that says so already is sent as written: a judge prompt
    ``composer judges tune`` registered keeps the sentence where the tuned judge sent it, so the judge
    naming it sends the very requests its carried-over check measured."""
    system, user = dollar_form(messages.system), dollar_form(messages.user)
    if UNTRUSTED[lang] in system:
        return PromptTemplate(system, user, tuple(data))
    template = fenced({lang: PromptTemplate(system, user)}, *data)[lang]
    return replace(template, system=template.system.strip())
