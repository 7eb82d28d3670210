"""Synthetic evaluation sets from a corpus: factoid, conceptual, multi-hop and unanswerable questions in
the passages' own language (Arabic, Persian, English), filtered, deduplicated and reproducible by seed."""

from composer.synth.cached import cache_path, synthesize_cached
from composer.synth.config import KINDS, SynthConfig, parse_mix
from composer.synth.engine import SynthOutcome, asynthesize, require_questions, synthesize
from composer.synth.filters import REASONS

__all__ = [
    "KINDS",
    "REASONS",
    "SynthConfig",
    "SynthOutcome",
    "asynthesize",
    "cache_path",
    "parse_mix",
    "require_questions",
    "synthesize",
    "synthesize_cached",
]
