"""Opening the indexes a work dir saved (``composer.pipeline.saved``), without the corpus: one by its key,
or the newest saved for a configuration; and the index of a corpus, reopened or built."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from composer.data.types import Corpus
from composer.embedding import CachedEmbedder
from composer.index.base import IndexDamaged
from composer.index.bm25 import Progress
from composer.pipeline.config import PipelineConfig
from composer.pipeline.indexing import IndexHandle, SaveTo, open_built, open_or_build
from composer.pipeline.saved import SAVED_DIR, find_saved, load_index, missing_index
from composer.pipeline.workspace import Workspace
from composer.retrieval.config import BM25_SETTINGS

logger = logging.getLogger(__name__)


def open_saved(
    workspace: Workspace,
    key: str,
    settings: dict[str, Any],
    *,
    rebuildable: bool,
    spill: Path,
    progress: Progress | None = None,
) -> tuple[IndexHandle, bool] | None:
    """Index ``key`` opened from what its build saved and kept among the workspace's open indexes, and
    whether its collection was reused (False: refilled from the saved data); None if nothing is saved for
    it. Damaged saved data raises IndexDamaged, or with ``rebuildable`` (the corpus is at hand) is removed
    with a warning."""
    folder = workspace.workdir / SAVED_DIR / key
    if not (folder / "index.json").is_file():
        return None
    try:
        built = load_index(folder)
    except IndexDamaged as exc:
        if not rebuildable:
            raise
        logger.warning("%s; rebuilding it from the corpus", exc)
        shutil.rmtree(folder, ignore_errors=True)
        return None
    handle, reused = open_built(workspace.backend, built, settings, progress=progress, spill=spill)
    workspace.indexes[key] = handle
    return handle, reused


def reopen_newest(
    workspace: Workspace, settings: dict[str, Any], embedder: str | None, *, spill: Path,
    progress: Progress | None = None,
) -> IndexHandle:
    """The newest index saved in the work dir for these index settings and embedder identity, opened (the
    one already open in this process if it is); a ComposerError when there is none."""
    saved = workspace.workdir / SAVED_DIR
    found = find_saved(saved, settings, embedder)
    if not found:
        raise missing_index(saved, settings)
    key = found[0].name
    handle = workspace.indexes.get(key)
    if handle is None:
        opened = open_saved(workspace, key, settings, rebuildable=False, spill=spill, progress=progress)
        if opened is None:  # removed since find_saved saw it
            raise missing_index(saved, settings)
        handle = opened[0]
    return handle


def open_or_build_for(
    workspace: Workspace, config: PipelineConfig, key: str, corpus: Corpus, embedder: CachedEmbedder | None,
    *, spill: Path, progress: Progress | None = None,
) -> tuple[IndexHandle, bool]:
    """Index ``key`` of ``corpus`` (what ``Pipeline.index`` opens): the one open in this process, else
    reopened from what its build saved, else built now; and whether its collection was reused."""
    handle = workspace.indexes.get(key)
    if handle is not None:
        return handle, True
    opened = open_saved(workspace, key, config.index_settings(), rebuildable=True, spill=spill,
                        progress=progress)
    if opened is not None:
        return opened
    chunks = workspace.chunks(corpus, config.chunking)
    titles = [doc.title if (doc := corpus.get(c.doc_id)) is not None else "" for c in chunks]
    record = {"settings": config.index_settings(), "corpus": corpus.fingerprint(),
              "embedder": embedder.identity if embedder is not None else None, "n_documents": len(corpus)}
    handle, reused = open_or_build(
        workspace.backend, key, chunks, titles=titles,
        bm25_options=config.retrieval.model_dump(include=set(BM25_SETTINGS)),
        settings=config.index_settings(), embedder=embedder, progress=progress, spill=spill,
        save=SaveTo(workspace.workdir / SAVED_DIR / key, record),
    )
    workspace.indexes[key] = handle
    return handle, reused
