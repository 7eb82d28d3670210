"""Tiny sentence-transformers models with random weights, saved to a folder: a local embedding model for
tests that must not download one."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
ARABIC_LETTERS = [chr(c) for c in range(0x0621, 0x064B)]
"""Arabic letters, as word pieces (``##`` too): any Arabic word gets its own tokens, so a tiny model
embeds two Arabic texts apart."""
ARABIC_PIECES = ARABIC_LETTERS + [f"##{letter}" for letter in ARABIC_LETTERS]


def save_tiny_sentence_transformer(root: Path, vocab: Sequence[str], *, seed: int = 0) -> Path:
    """A 1-layer, 16-dim BERT over ``vocab`` (after the special tokens) with random weights, mean-pooled,
    saved as the SentenceTransformer folder ``root/tiny-bert``."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import BertConfig, BertModel, BertTokenizer
    from transformers.utils import logging as hf_logging

    words = SPECIAL + [w for w in vocab if w not in SPECIAL]
    hf_logging.disable_progress_bar()
    hf_dir, st_dir = root / "hf", root / "tiny-bert"
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64)
    BertModel(config).save_pretrained(str(hf_dir))
    BertTokenizer(vocab={w: i for i, w in enumerate(words)}).save_pretrained(str(hf_dir))
    transformer = Transformer(str(hf_dir), max_seq_length=32)
    pooling = Pooling(transformer.get_embedding_dimension(), "mean")
    SentenceTransformer(modules=[transformer, pooling], device="cpu").save(str(st_dir))
    hf_logging.enable_progress_bar()
    return st_dir
