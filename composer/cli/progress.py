"""Rich progress bars on stderr for the pipeline's encode, index and query stages."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from composer.index.bm25 import Progress

_LABELS = {"analyze": "analyzing (BM25)", "encode": "encoding", "index": "indexing", "query": "querying"}


@contextmanager
def pipeline_progress(enabled: bool = True) -> Iterator[Progress | None]:
    """A ``Progress`` drawing one bar per stage; ``None`` when disabled (e.g. with ``--json``)."""
    if not enabled:
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        Task,
        TaskID,
        TextColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    from composer.console import make_console

    class RateColumn(ProgressColumn):
        """Items per second (Rich's own speed column counts bytes)."""

        def render(self, task: Task) -> Text:
            return Text(f"{task.speed:,.0f}/s" if task.speed else "")

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), RateColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=make_console(stderr=True), transient=True) as bars:
        tasks: dict[str, TaskID] = {}

        def hook(stage: str, done: int, total: int) -> None:
            if total == 0:
                return
            if stage not in tasks:
                tasks[stage] = bars.add_task(_LABELS.get(stage, stage), total=total)
            bars.update(tasks[stage], completed=done, total=total)

        yield hook
