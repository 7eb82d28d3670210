"""Lists of strings through a pickle stream without a second copy of them staying in memory.

CPython pickles a ``str`` through its UTF-8 form and keeps that form attached to the string for the rest
of its life (``reducer_override`` cannot intercept ``str``). Arabic and Persian take 2 bytes a letter in
either form, so every chunk text a study sent to an analysis worker or spooled for its MLflow writer would
stay in memory twice: 80 MB more at 100,000 ARCD-like chunks, measured. ``dump_strings`` writes them as
blocks of UTF-8 bytes encoded on the way (a block at a time in memory), ``load_strings`` reads them back.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import IO

BLOCK = 4096
"""Strings per pickled block."""


def dump_strings(strings: Sequence[str], file: IO[bytes]) -> None:
    for lo in range(0, len(strings), BLOCK):
        block = [s.encode("utf-8") for s in strings[lo:lo + BLOCK]]
        pickle.dump(block, file, protocol=pickle.HIGHEST_PROTOCOL)
    pickle.dump(None, file, protocol=pickle.HIGHEST_PROTOCOL)


def load_strings(file: IO[bytes]) -> list[str]:
    out: list[str] = []
    while (block := pickle.load(file)) is not None:
        out.extend(data.decode("utf-8") for data in block)
    return out
