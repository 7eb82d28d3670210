"""Arabic, Persian and English text: normalization, language detection, tokens, sentences."""

from composer.text.lang import Language, detect_language
from composer.text.normalize import normalize
from composer.text.sentences import sentence_spans, split_sentences
from composer.text.tokenize import content_tokens, tokenize

__all__ = [
    "Language",
    "content_tokens",
    "detect_language",
    "normalize",
    "sentence_spans",
    "split_sentences",
    "tokenize",
]
