"""The `composer` command line. Commands live in their own modules and import heavy libraries lazily,
so `composer --help` answers at once."""

from __future__ import annotations

import errno
import logging
import re
import resource
import sys
from collections.abc import Sequence
from typing import Any, ClassVar

import typer
from typer.core import TyperCommand, TyperGroup

from composer.cli.eval import eval_command
from composer.cli.export import export_command
from composer.cli.index import index_command
from composer.cli.judges import judges_app
from composer.cli.label import label_command
from composer.cli.optimize import optimize_command
from composer.cli.report import report_command
from composer.cli.search import search_command
from composer.cli.serve import serve_command
from composer.cli.synth import synth_command
from composer.cli.trials import trials_command
from composer.cli.tune_prompt import tune_prompt_command
from composer.cli.ui import ui_command
from composer.errors import ComposerError, causes
from composer.files import disk_full_error

_INTEGER = re.compile(r"[+-]?\d+")


def user_error_message(exc: BaseException) -> str | None:
    """The one-line message for an error in the user's input, or None for a bug (keeps its traceback)."""
    if (full := disk_full_error(exc)) is not None:  # even under an error raised while handling it
        return str(full)
    if (files := too_many_open_files(exc)) is not None:
        return files
    if isinstance(exc, ComposerError):
        return exc.cli_message()  # the options it suggests as flags
    if isinstance(exc, FileNotFoundError | FileExistsError | IsADirectoryError | NotADirectoryError
                  | PermissionError):
        return f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc)
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(exc, pandas.errors.ParserError | pandas.errors.EmptyDataError):
        return "could not parse input: " + " ".join(str(exc).split())
    return None


def too_many_open_files(exc: BaseException) -> str | None:
    """What to do about the open-file limit behind ``exc`` (following the errors it was raised from or
    while handling: SQLAlchemy and alembic wrap it), or None when none is behind it."""
    for current in causes(exc):
        if isinstance(current, OSError) and current.errno == errno.ENFILE:
            return "too many open files on this machine (its limit on all processes' open files was reached)"
        if isinstance(current, OSError) and current.errno == errno.EMFILE:
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            limit = "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
            return f"too many open files (the open-file limit is {limit}; raise it with `ulimit -n 1024`)"
    return None


class ComposerGroup(TyperGroup):
    """Prints user errors as one `error: ...` line on stderr and exits 2 (1 for a study that had to stop),
    without a traceback unless `--debug`."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            message = user_error_message(exc)
            if message is None:
                raise
            if logging.getLogger("composer").isEnabledFor(logging.DEBUG):
                logging.getLogger("composer").debug("traceback", exc_info=exc)
            typer.echo(f"error: {message}", err=True)
            raise typer.Exit(getattr(exc, "exit_code", 2)) from None


class MultiValueCommand(TyperCommand):
    """Accepts `--k 1 3 5 10` for repeatable options (click alone wants `--k 1 --k 3 ...`).

    Only integers are taken as further values, so a positional argument after the list stays positional.
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        repeatable = {opt for p in self.params if p.multiple for opt in p.opts}
        return super().parse_args(ctx, expand_multi_values(args, repeatable))


def expand_multi_values(args: Sequence[str], options: set[str]) -> list[str]:
    """Rewrite `--k 1 3 5` as `--k 1 --k 3 --k 5` for the given options; other arguments are kept."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        out.append(arg)
        i += 1
        if arg in options and i < len(args):
            out.append(args[i])
            i += 1
            while i < len(args) and _INTEGER.fullmatch(args[i]):
                out += [arg, args[i]]
                i += 1
    return out


app = typer.Typer(
    name="composer",
    cls=ComposerGroup,
    help="Find the best RAG configuration for your corpus and questions – Arabic and Persian first-class.",
    rich_markup_mode="rich",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # a bug's traceback must not print locals: they may hold API keys
)


def _print_version(value: bool) -> None:
    """``--version``: the installed package's version, then exit 0 before any command runs."""
    if value:
        from composer.version import composer_version

        typer.echo(f"composer {composer_version()}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_print_version, is_eager=True, metavar="",
        help="Print Composer's version and exit.",
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also show progress messages.", metavar=""),
    debug: bool = typer.Option(
        False, "--debug", help="Show debug messages and the traceback of every failed trial and error.",
        metavar="",
    ),
) -> None:
    _configure_logging(logging.DEBUG if debug else logging.INFO if verbose else logging.WARNING)


app.command("eval", cls=MultiValueCommand)(eval_command)
app.command("index")(index_command)
app.command("search")(search_command)
app.command("optimize")(optimize_command)
app.command("trials")(trials_command)
app.command("export")(export_command)
app.command("ui")(ui_command)
app.command("report")(report_command)
app.command("synth")(synth_command)
app.command("tune-prompt")(tune_prompt_command)
app.command("label")(label_command)
app.add_typer(judges_app, name="judges")
app.command("serve")(serve_command)


def _configure_logging(level: int) -> None:
    """Show the library's warnings (e.g. unknown relevant ids) on stderr, once per process."""
    logger = logging.getLogger("composer")
    logger.setLevel(level)
    if not any(isinstance(h, _ConsoleHandler) for h in logger.handlers):
        logger.addHandler(_ConsoleHandler())


class _ConsoleHandler(logging.Handler):
    """`warning: message` on one line (no hard wrapping, so it greps), the level coloured on a terminal."""

    _STYLES: ClassVar[dict[int, str]] = {logging.WARNING: "yellow", logging.ERROR: "red"}

    def __init__(self) -> None:
        from composer.console import make_console

        super().__init__()
        self._console = make_console(stderr=True, soft_wrap=True, highlight=False)

    def emit(self, record: logging.LogRecord) -> None:
        from rich.text import Text

        try:
            style = self._STYLES.get(record.levelno, "dim")
            self._console.print(Text.assemble((f"{record.levelname.lower()}: ", style), self.format(record)))
        except Exception:
            self.handleError(record)


def main() -> None:
    """Console-script entry point (`composer`)."""
    app(prog_name="composer")
