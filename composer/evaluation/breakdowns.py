"""Scores by turn: a conversational question set's metrics over first turns and follow-ups, by turn
position, and per conversation, each named ``<metric>.<view>`` (``recall@5.follow_up``).

A follow-up that cannot find its passage from its own words is hidden in a mean over every turn; these
views show it. Each view's values come with their conversations, so its interval resamples
conversations (``composer.metrics.stats``). A set of lone questions has no views.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from composer.evaluation.table import SampleTable

FIRST_TURN = "first_turn"
FOLLOW_UP = "follow_up"
CONVERSATION = "conversation"
"""The per-conversation view: each conversation's mean over its scored turns, one value a conversation."""
LAST_POSITION = 5
"""Turns from this position on are one view (``turn_5_plus``): few conversations run longer."""
ALL_FOUND = "all_found"
"""``all_found@k.conversation``: the share of conversations every labelled turn of which had a relevant
hit in the top k (its ``hit_rate@k`` is 1)."""

Sample = tuple[npt.NDArray[np.float64], npt.NDArray[np.intp] | None]
"""A view's values and each value's conversation as a number (None: each value is its own, as in the
per-conversation view)."""


def turn_view(position: int) -> str:
    """The view of a turn position: ``turn_1``... and ``turn_5_plus`` for the fifth and later."""
    return f"turn_{position}" if position < LAST_POSITION else f"turn_{LAST_POSITION}_plus"


def views(table: SampleTable) -> dict[str, npt.NDArray[np.bool_]]:
    """Each view of the turns (first turns, follow-ups, each turn position) as a row mask; none for a set
    of lone questions."""
    if table.follow_ups is None or table.turns is None:
        return {}
    follow = np.array(table.follow_ups, dtype=bool)
    positions = np.minimum(np.array(table.turns, dtype=np.int64), LAST_POSITION)
    out = {FIRST_TURN: ~follow, FOLLOW_UP: follow}
    out.update({turn_view(p): positions == p for p in sorted(set(positions.tolist()))})
    return out


def breakdown_samples(table: SampleTable) -> Iterator[tuple[str, Sample]]:
    """Every breakdown's name and sample, view by view (a view's metrics mostly share its conversations,
    so their bootstraps share one resample matrix): each metric over each view of the turns, each
    metric's per-conversation mean, and ``all_found@k`` for each ``hit_rate@k``."""
    if table.conversations is None:
        return
    codes = conversation_codes(table.conversations)
    for view, rows in views(table).items():
        for name, column in table.metrics.items():
            picked = rows & ~np.isnan(column)
            if picked.any():
                yield f"{name}.{view}", (column[picked], codes[picked])
    for name, column in table.metrics.items():
        scored = ~np.isnan(column)
        turns = np.bincount(codes, weights=scored.astype(np.float64))
        if turns.any():
            sums = np.bincount(codes, weights=np.where(scored, column, 0.0))
            yield f"{name}.{CONVERSATION}", (sums[turns > 0] / turns[turns > 0], None)
    for name, column in table.metrics.items():
        base, at, k = name.partition("@")
        if base == "hit_rate" and at:
            scored = ~np.isnan(column)
            labelled = np.bincount(codes, weights=scored.astype(np.float64))
            if labelled.any():
                found = np.bincount(codes, weights=(scored & (column >= 1.0)).astype(np.float64))
                every = (found == labelled)[labelled > 0].astype(np.float64)
                yield f"{ALL_FOUND}@{k}.{CONVERSATION}", (every, None)


def conversation_codes(conversations: tuple[str, ...]) -> npt.NDArray[np.intp]:
    """Each question's conversation as a number: a view's rows are picked from them without a string."""
    _, codes = np.unique(np.array(conversations, dtype=object), return_inverse=True)
    return codes.astype(np.intp, copy=False)


def split_name(name: str) -> tuple[str, str]:
    """A breakdown's metric and view: ``recall@5.turn_5_plus`` -> (``recall@5``, ``turn_5_plus``)."""
    metric, _, view = name.rpartition(".")
    return metric, view
